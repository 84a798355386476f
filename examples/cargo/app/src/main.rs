//! Derivatives of `model`'s functions, synthesized by enzcc when the program is linked.
use std::os::raw::c_int;

extern "C" {
    static enzyme_dup: c_int;
    static enzyme_const: c_int;
    // any suffix after __enzyme_autodiff works: one declaration per return type
    fn __enzyme_autodiff(f: *const (), ...) -> f64;
    fn __enzyme_autodiff_void(f: *const (), ...);
    fn __enzyme_fwddiff(f: *const (), ...) -> f64;
}

/// d cube / dx by reverse mode: 3 x^2 + 2 cos(x)
fn dcube(x: f64) -> f64 {
    unsafe { __enzyme_autodiff(model::cube as *const (), x) }
}

/// d cube / dx by forward mode (x, then its tangent)
fn tcube(x: f64) -> f64 {
    unsafe { __enzyme_fwddiff(model::cube as *const (), x, 1.0f64) }
}

/// The gradient of Rosenbrock's function at x (reverse mode adds into dx: it starts at zero).
fn grad_rosenbrock(x: &[f64]) -> Vec<f64> {
    let mut dx = vec![0.0; x.len()];
    unsafe {
        __enzyme_autodiff_void(model::rosenbrock as *const (), enzyme_dup, x.as_ptr(), dx.as_mut_ptr(),
                               enzyme_const, x.len());
    }
    dx
}

fn main() {
    println!("dcube(2) = {:.6}, tcube(2) = {:.6}", dcube(2.0), tcube(2.0));
    println!("grad rosenbrock([0.5, 1.5, -1]) = {:?}", grad_rosenbrock(&[0.5, 1.5, -1.0]));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cube_derivative_is_analytic() {
        for x in [-1.5, 0.0, 0.3, 2.0] {
            let want = 3.0 * x * x + 2.0 * f64::cos(x);
            assert!((dcube(x) - want).abs() < 1e-12, "reverse at {x}: {} vs {want}", dcube(x));
            assert!((tcube(x) - want).abs() < 1e-12, "forward at {x}: {} vs {want}", tcube(x));
        }
    }

    #[test]
    fn rosenbrock_gradient_is_analytic() {
        let x = [0.5, 1.5, -1.0, 2.0];
        let mut want = [0.0; 4];
        for i in 0..3 {
            want[i] += -400.0 * x[i] * (x[i + 1] - x[i] * x[i]) - 2.0 * (1.0 - x[i]);
            want[i + 1] += 200.0 * (x[i + 1] - x[i] * x[i]);
        }
        let got = grad_rosenbrock(&x);
        for i in 0..4 {
            assert!((got[i] - want[i]).abs() < 1e-10, "d/dx[{i}]: {} vs {}", got[i], want[i]);
        }
    }
}
