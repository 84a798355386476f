/* BA: bundle adjustment (the ADBench problem), as one scalar objective.
 *
 * Camera parameters (11): angle-axis rotation (3), center (3), focal length (1), principal point (2),
 * radial distortion k1 k2 (2). Each observation j sees point X[pt_j] from camera cam_j:
 *   y = R(rot) (X - C);  p = y[0:2] / y[2];  p *= 1 + k1 |p|^2 + k2 |p|^4;  proj = f p + x0
 *   reprojection residual  r_j = w_j (proj - feature_j)     (2 values)
 *   weight residual        e_j = 1 - w_j^2
 * objective = sum_j |r_j|^2 + e_j^2. Active parameters: cameras, points and weights (one array p).
 */
#include "common.h"

static void cross(const double *a, const double *b, double *out) {
  out[0] = a[1] * b[2] - a[2] * b[1];
  out[1] = a[2] * b[0] - a[0] * b[2];
  out[2] = a[0] * b[1] - a[1] * b[0];
}

/* rotate pt by the angle-axis vector rot (Rodrigues' formula; first order near zero) */
static void rodrigues_rotate(const double *rot, const double *pt, double *out) {
  double sqtheta = rot[0] * rot[0] + rot[1] * rot[1] + rot[2] * rot[2];
  double c[3];
  if (sqtheta != 0) {
    double theta = sqrt(sqtheta), costh = cos(theta), sinth = sin(theta), inv = 1.0 / theta;
    double u[3] = {rot[0] * inv, rot[1] * inv, rot[2] * inv};
    cross(u, pt, c);
    double tmp = (u[0] * pt[0] + u[1] * pt[1] + u[2] * pt[2]) * (1 - costh);
    for (int i = 0; i < 3; i++) out[i] = pt[i] * costh + c[i] * sinth + u[i] * tmp;
  } else {
    cross(rot, pt, c);
    for (int i = 0; i < 3; i++) out[i] = pt[i] + c[i];
  }
}

static void project(const double *cam, const double *X, double *proj) {
  double xc[3], y[3];
  for (int i = 0; i < 3; i++) xc[i] = X[i] - cam[3 + i];
  rodrigues_rotate(cam, xc, y);
  double px = y[0] / y[2], py = y[1] / y[2];
  double rsq = px * px + py * py;
  double distortion = 1 + cam[9] * rsq + cam[10] * rsq * rsq;
  proj[0] = px * distortion * cam[6] + cam[7];
  proj[1] = py * distortion * cam[6] + cam[8];
}

double ba_objective(const double *p, int ncams, int npts, int nobs, const int *obs_cam, const int *obs_pt,
                    const double *feats) {
  const double *cams = p, *pts = p + 11 * ncams, *w = p + 11 * ncams + 3 * npts;
  double s = 0;
  for (int j = 0; j < nobs; j++) {
    double proj[2];
    project(cams + 11 * obs_cam[j], pts + 3 * obs_pt[j], proj);
    double rx = w[j] * (proj[0] - feats[2 * j]), ry = w[j] * (proj[1] - feats[2 * j + 1]);
    double we = 1 - w[j] * w[j];
    s += rx * rx + ry * ry + we * we;
  }
  return s;
}

/* ---------------------------------------------------------------------------------------------- */

static int NC, NP, NO;
static long P;
static int *CAM, *PT;
static double *FEAT;

static double primal(const double *p) { return ba_objective(p, NC, NP, NO, CAM, PT, FEAT); }

static void gradient(const double *p, double *g) {
  memset(g, 0, sizeof(double) * P);
  __enzyme_autodiff((void *)ba_objective, enzyme_dup, p, g, enzyme_const, NC, enzyme_const, NP, enzyme_const, NO,
                    enzyme_const, CAM, enzyme_const, PT, enzyme_const, FEAT);
}

int main(int argc, char **argv) {
  bench_opts o = bench_args(argc, argv);
  bench_reader r = bench_open(o.data);
  NC = bench_read_int(&r); NP = bench_read_int(&r); NO = bench_read_int(&r);
  P = 11L * NC + 3L * NP + NO;
  double *p = malloc(sizeof(double) * P);
  for (long i = 0; i < 11L * NC + 3L * NP + NO; i++) p[i] = bench_read_double(&r);
  CAM = malloc(sizeof(int) * NO); PT = malloc(sizeof(int) * NO); FEAT = malloc(sizeof(double) * 2 * NO);
  for (int j = 0; j < NO; j++) {
    CAM[j] = bench_read_int(&r); PT[j] = bench_read_int(&r);
    FEAT[2 * j] = bench_read_double(&r); FEAT[2 * j + 1] = bench_read_double(&r);
  }
  bench_close(&r);
  bench_block blocks[] = {{"cams", 0, 11L * NC}, {"points", 11L * NC, 3L * NP}, {"weights", 11L * NC + 3L * NP, NO}};
  return bench_run("ba", &o, P, p, primal, gradient, blocks, 3);
}
