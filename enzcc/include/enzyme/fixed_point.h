/* enzcc: fixed-point loops differentiated at their converged state.
 *
 *   __enzyme_fixed_point(step, enzyme_fp_state, z, bytes,
 *                        [enzyme_fp_reduction, r,] [enzyme_fp_max_iters, n,]
 *                        [enzyme_fp_control, control,]
 *                        [enzyme_checkpoint_region, p, bytes,]... args...);
 *
 * runs `int64_t i = 0; while (step(i++, args...));`, a loop that iterates the
 * state z (doubles or floats, `bytes` long) to a fixed point. Reverse mode keeps
 * only the converged state and iterates the adjoint of one step there until it
 * converges; forward mode iterates the tangent of one step there. See enzcc's
 * docs/api.md for the convergence test and its options; `control` is
 * `int control(double *cumul, double *reduction)`.
 */
#ifndef ENZCC_ENZYME_FIXED_POINT_H
#define ENZCC_ENZYME_FIXED_POINT_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

extern int enzyme_fp_state;
extern int enzyme_fp_reduction;
extern int enzyme_fp_max_iters;
extern int enzyme_fp_control;
extern int enzyme_checkpoint_region;

void __enzyme_fixed_point(void *step, ...);
/* inside a loop: marks it as the fixed-point iteration (a negative reduction or max_iters, or a null control,
   for the defaults), then (state, bytes) pairs and enzyme_checkpoint_region pairs */
void __enzyme_set_fixed_point(double reduction, int64_t max_iters, void *control, ...);

#ifdef __cplusplus
}
#endif

#endif
