//! A plain Rust library: nothing in it knows about derivatives. Functions that are differentiated are
//! `extern "C"`, so that the derivative calls pass them their arguments as C does.

/// x^3 + 2 sin(x)
pub extern "C" fn cube(x: f64) -> f64 {
    x * x * x + 2.0 * x.sin()
}

/// Rosenbrock's function of x[0..n]: sum of 100 (x[i+1] - x[i]^2)^2 + (1 - x[i])^2.
pub extern "C" fn rosenbrock(x: *const f64, n: usize) -> f64 {
    let x = unsafe { std::slice::from_raw_parts(x, n) };
    let mut s = 0.0;
    for i in 0..n.saturating_sub(1) {
        let a = x[i + 1] - x[i] * x[i];
        let b = 1.0 - x[i];
        s += 100.0 * a * a + b * b;
    }
    s
}
