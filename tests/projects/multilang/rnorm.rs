/// Euclidean norm of a C array, callable from C.
#[no_mangle]
pub extern "C" fn rust_norm(x: *const f64, n: i64) -> f64 {
    let xs = unsafe { std::slice::from_raw_parts(x, n as usize) };
    xs.iter().map(|v| v * v).sum::<f64>().sqrt()
}
