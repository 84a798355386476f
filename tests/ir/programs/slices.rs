// Rust library: loops over slices, f64 math, iterators, Option/Result, panics.
pub fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

pub fn normalize(v: &mut [f64]) {
    let n: f64 = v.iter().map(|x| x * x).sum::<f64>().sqrt();
    if n > 0.0 {
        for x in v.iter_mut() {
            *x /= n;
        }
    }
}

pub fn poly(coeffs: &[f64], x: f64) -> f64 {
    let mut acc = 0.0;
    for c in coeffs.iter().rev() {
        acc = acc * x + c;
    }
    acc
}

pub fn indexed(a: &[f64], i: usize) -> f64 {
    a[i].sin() + a[i].exp() + a[i].powf(1.5) + a[i].ln_1p() + a[i].tanh()
}

pub fn find_first_negative(a: &[f64]) -> Option<usize> {
    for (i, x) in a.iter().enumerate() {
        if *x < 0.0 {
            return Some(i);
        }
    }
    None
}

pub fn matvec(m: &[f64], v: &[f64], out: &mut Vec<f64>, rows: usize) {
    let cols = v.len();
    out.clear();
    for r in 0..rows {
        let mut s = 0.0;
        for c in 0..cols {
            s += m[r * cols + c] * v[c];
        }
        out.push(s);
    }
}

pub fn parse_sum(items: &[&str]) -> Result<i64, std::num::ParseIntError> {
    let mut total = 0i64;
    for s in items {
        total = total.wrapping_add(s.parse::<i64>()?);
    }
    Ok(total)
}

pub struct Particle {
    pub pos: [f64; 3],
    pub vel: [f64; 3],
    pub mass: f32,
}

pub fn kinetic(ps: &[Particle]) -> f64 {
    ps.iter()
        .map(|p| 0.5 * p.mass as f64 * p.vel.iter().map(|v| v * v).sum::<f64>())
        .sum()
}

pub fn checked(a: u32, b: u32) -> u32 {
    a.checked_mul(b).unwrap_or(u32::MAX) / (b | 1)
}
