/* Hand: fitting a simplified skinned hand model to target points (in the spirit of ADBench's hand tracking).
 *
 * The model (made by gen.py): a kinematic chain of 22 bones (forearm, palm, 5 fingers x [metacarpal,
 * proximal, middle, distal]) with parent indices, each bone's rest transform relative to its parent
 * (3x4 rigid), the inverse of each bone's rest absolute transform, rest vertices and dense per-bone vertex
 * weights (linear blend skinning).
 *
 * Pose (26 parameters): global rotation (angle-axis, 3), global translation (3), and per finger f
 * [flex, abduction] of the proximal joint, flex of the middle joint, flex of the distal joint. A bone's
 * joint rotation is Rz(z) Ry(y) Rx(x) from its Euler angles (x = flex, z = abduction; unused ones are 0).
 *   relative_b = rest_relative_b * joint_rotation_b
 *   absolute_b = absolute_parent(b) * relative_b
 *   skin_b     = absolute_b * inverse_rest_absolute_b
 *   v'         = R_global (sum_b weight_bv skin_b v) + t_global
 * objective = sum_v |v' - target_v|^2.
 */
#include "common.h"

#define NPOSE 26

/* a = b * c for 3x4 row-major rigid transforms (implicit last row 0 0 0 1) */
static void compose(const double *b, const double *c, double *a) {
  for (int i = 0; i < 3; i++) {
    for (int j = 0; j < 4; j++) {
      double s = j == 3 ? b[4 * i + 3] : 0.0;
      for (int k = 0; k < 3; k++) s += b[4 * i + k] * c[4 * k + j];
      a[4 * i + j] = s;
    }
  }
}

static void euler_to_matrix(double x, double y, double z, double *m) {
  double cx = cos(x), sx = sin(x), cy = cos(y), sy = sin(y), cz = cos(z), sz = sin(z);
  m[0] = cz * cy; m[1] = cz * sy * sx - sz * cx; m[2] = cz * sy * cx + sz * sx; m[3] = 0;
  m[4] = sz * cy; m[5] = sz * sy * sx + cz * cx; m[6] = sz * sy * cx - cz * sx; m[7] = 0;
  m[8] = -sy; m[9] = cy * sx; m[10] = cy * cx; m[11] = 0;
}

/* rotation matrix of an angle-axis vector (Rodrigues); first order near zero */
static void angle_axis_to_matrix(const double *w, double *R) {
  double th2 = w[0] * w[0] + w[1] * w[1] + w[2] * w[2];
  if (th2 > 1e-16) {
    double th = sqrt(th2), c = cos(th), s = sin(th), x = w[0] / th, y = w[1] / th, z = w[2] / th;
    R[0] = c + x * x * (1 - c);     R[1] = x * y * (1 - c) - z * s; R[2] = x * z * (1 - c) + y * s;
    R[3] = y * x * (1 - c) + z * s; R[4] = c + y * y * (1 - c);     R[5] = y * z * (1 - c) - x * s;
    R[6] = z * x * (1 - c) - y * s; R[7] = z * y * (1 - c) + x * s; R[8] = c + z * z * (1 - c);
  } else {
    R[0] = 1;     R[1] = -w[2]; R[2] = w[1];
    R[3] = w[2];  R[4] = 1;     R[5] = -w[0];
    R[6] = -w[1]; R[7] = w[0];  R[8] = 1;
  }
}

/* per-bone Euler angles (nb x 3) from the 26 pose parameters; bones 0,1 and the metacarpals stay at rest */
static void pose_to_angles(const double *pose, int nb, double *angles) {
  for (int i = 0; i < 3 * nb; i++) angles[i] = 0;
  for (int f = 0; f < 5; f++) {
    const double *q = pose + 6 + 4 * f;
    int proximal = 2 + 4 * f + 1;
    angles[3 * proximal + 0] = q[0];
    angles[3 * proximal + 2] = q[1];
    angles[3 * (proximal + 1) + 0] = q[2];
    angles[3 * (proximal + 2) + 0] = q[3];
  }
}

double hand_objective(const double *pose, int nb, const int *parent, const double *rest_rel,
                      const double *inv_rest_abs, int nv, const double *verts, const double *weights,
                      const double *targets) {
  double *angles = malloc(sizeof(double) * 3 * nb), *rel = malloc(sizeof(double) * 12 * nb);
  double *abs_ = malloc(sizeof(double) * 12 * nb), *skin = malloc(sizeof(double) * 12 * nb);
  double rot[12], R[9];
  pose_to_angles(pose, nb, angles);
  for (int b = 0; b < nb; b++) {
    euler_to_matrix(angles[3 * b], angles[3 * b + 1], angles[3 * b + 2], rot);
    compose(rest_rel + 12 * b, rot, rel + 12 * b);
    if (parent[b] < 0)
      for (int i = 0; i < 12; i++) abs_[12 * b + i] = rel[12 * b + i];
    else
      compose(abs_ + 12 * parent[b], rel + 12 * b, abs_ + 12 * b);
    compose(abs_ + 12 * b, inv_rest_abs + 12 * b, skin + 12 * b);
  }
  angle_axis_to_matrix(pose, R);
  double err = 0;
  for (int v = 0; v < nv; v++) {
    const double *x = verts + 3 * v;
    double s[3] = {0, 0, 0};
    for (int b = 0; b < nb; b++) {
      double w = weights[(long)b * nv + v];
      const double *m = skin + 12 * b;
      for (int i = 0; i < 3; i++) s[i] += w * (m[4 * i] * x[0] + m[4 * i + 1] * x[1] + m[4 * i + 2] * x[2] + m[4 * i + 3]);
    }
    for (int i = 0; i < 3; i++) {
      double y = R[3 * i] * s[0] + R[3 * i + 1] * s[1] + R[3 * i + 2] * s[2] + pose[3 + i] - targets[3 * v + i];
      err += y * y;
    }
  }
  free(angles); free(rel); free(abs_); free(skin);
  return err;
}

/* ---------------------------------------------------------------------------------------------- */

static int NB, NV;
static int *PARENT;
static double *REST_REL, *INV_REST_ABS, *VERTS, *WEIGHTS, *TARGETS;

static double primal(const double *p) {
  return hand_objective(p, NB, PARENT, REST_REL, INV_REST_ABS, NV, VERTS, WEIGHTS, TARGETS);
}

static void gradient(const double *p, double *g) {
  memset(g, 0, sizeof(double) * NPOSE);
  __enzyme_autodiff((void *)hand_objective, enzyme_dup, p, g, enzyme_const, NB, enzyme_const, PARENT,
                    enzyme_const, REST_REL, enzyme_const, INV_REST_ABS, enzyme_const, NV, enzyme_const, VERTS,
                    enzyme_const, WEIGHTS, enzyme_const, TARGETS);
}

int main(int argc, char **argv) {
  bench_opts o = bench_args(argc, argv);
  bench_reader r = bench_open(o.data);
  NB = bench_read_int(&r); NV = bench_read_int(&r);
  if (NB != 22) {
    fprintf(stderr, "hand: the pose mapping expects 22 bones, got %d\n", NB);
    return 2;
  }
  PARENT = bench_read_ints(&r, NB);
  REST_REL = bench_read_doubles(&r, 12L * NB);
  INV_REST_ABS = bench_read_doubles(&r, 12L * NB);
  VERTS = bench_read_doubles(&r, 3L * NV);
  WEIGHTS = bench_read_doubles(&r, (long)NB * NV);
  TARGETS = bench_read_doubles(&r, 3L * NV);
  double *p = bench_read_doubles(&r, NPOSE);
  bench_close(&r);
  bench_block blocks[] = {{"global", 0, 6}, {"fingers", 6, 20}};
  return bench_run("hand", &o, NPOSE, p, primal, gradient, blocks, 2);
}
