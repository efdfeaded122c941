//! Small constant tensors (shape arithmetic: `Shape` → `Gather` → `Concat` → `Reshape`, `Slice`
//! bounds, `ConstantOfShape`, scalars) and their evaluation. Values are only kept for tensors of at
//! most [`MAX_VALUES`] elements; larger constants keep their shape only.

use super::proto::{tensor_proto::DataType, TensorProto};

/// Constants with more elements than this keep only their shape.
pub const MAX_VALUES: u64 = 4096;

/// A constant: its dims and, when small, its values (as f64; int64 shape values are exact).
#[derive(Debug, Clone, PartialEq)]
pub struct Konst {
    /// Sizes.
    pub dims: Vec<u64>,
    /// Values in row-major order, when known.
    pub vals: Option<Vec<f64>>,
    /// Whether the element type is an integer or bool type.
    pub int: bool,
}

impl Konst {
    /// A 1-D int64 constant.
    pub fn ints(v: &[i64]) -> Self {
        Konst {
            dims: vec![v.len() as u64],
            vals: Some(v.iter().map(|&x| x as f64).collect()),
            int: true,
        }
    }

    /// The values as i64, when known.
    pub fn as_ints(&self) -> Option<Vec<i64>> {
        self.vals
            .as_ref()
            .map(|v| v.iter().map(|&x| x.clamp(-9.0e18, 9.0e18) as i64).collect())
    }

    /// The single value of a one-element constant.
    pub fn scalar(&self) -> Option<f64> {
        match self.vals.as_deref() {
            Some([x]) => Some(*x),
            _ => None,
        }
    }

    /// Number of elements (saturating).
    pub fn numel(&self) -> u64 {
        self.dims.iter().fold(1u64, |a, &d| a.saturating_mul(d))
    }
}

/// Whether an ONNX element type is integral (or bool).
pub fn is_int_type(t: i32) -> bool {
    !matches!(
        DataType::try_from(t),
        Ok(DataType::Float | DataType::Float16 | DataType::Bfloat16 | DataType::Double)
    )
}

/// Decodes a small tensor whose data is inline (`raw_data` or the typed fields); `external`
/// supplies the bytes of tensors stored in an external file.
pub fn decode(t: &TensorProto, external: Option<&[u8]>) -> Option<Konst> {
    let dims: Vec<u64> = t
        .dims
        .iter()
        .map(|&d| u64::try_from(d).ok())
        .collect::<Option<_>>()?;
    let n = dims.iter().try_fold(1u64, |a, &d| a.checked_mul(d))?;
    let int = is_int_type(t.data_type());
    if n > MAX_VALUES {
        return Some(Konst {
            dims,
            vals: None,
            int,
        });
    }
    let raw: Option<&[u8]> = external.or(t.raw_data.as_deref());
    let vals: Vec<f64> = match (DataType::try_from(t.data_type()).ok()?, raw) {
        (DataType::Int64, Some(r)) => r
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap_or([0; 8])) as f64)
            .collect(),
        (DataType::Int32, Some(r)) => r
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes(c.try_into().unwrap_or([0; 4])) as f64)
            .collect(),
        (DataType::Float, Some(r)) => r
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap_or([0; 4])) as f64)
            .collect(),
        (DataType::Double, Some(r)) => r
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
            .collect(),
        (DataType::Bool | DataType::Uint8 | DataType::Int8, Some(r)) => {
            r.iter().map(|&b| b as f64).collect()
        }
        (DataType::Int64, None) => t.int64_data.iter().map(|&x| x as f64).collect(),
        (DataType::Int32 | DataType::Bool | DataType::Uint8 | DataType::Int8, None) => {
            t.int32_data.iter().map(|&x| x as f64).collect()
        }
        (DataType::Float, None) => t.float_data.iter().map(|&x| x as f64).collect(),
        (DataType::Double, None) => t.double_data.clone(),
        _ => {
            return Some(Konst {
                dims,
                vals: None,
                int,
            })
        }
    };
    let vals = (vals.len() as u64 == n).then_some(vals);
    Some(Konst { dims, vals, int })
}

/// Numpy broadcasting of two constants' dims.
fn broadcast(a: &[u64], b: &[u64]) -> Option<Vec<u64>> {
    vramscope_core::ops::broadcast_shapes(a, b)
}

/// Elementwise binary op on two constants (values only when both are known and one is a scalar
/// or they have the same shape).
pub fn binary(a: &Konst, b: &Konst, f: impl Fn(f64, f64) -> f64) -> Option<Konst> {
    let dims = broadcast(&a.dims, &b.dims)?;
    let vals = match (&a.vals, &b.vals) {
        (Some(x), Some(y)) if x.len() == y.len() => {
            Some(x.iter().zip(y).map(|(&p, &q)| f(p, q)).collect())
        }
        (Some(x), Some(y)) if y.len() == 1 => Some(x.iter().map(|&p| f(p, y[0])).collect()),
        (Some(x), Some(y)) if x.len() == 1 => Some(y.iter().map(|&q| f(x[0], q)).collect()),
        _ => None,
    };
    Some(Konst {
        dims,
        vals,
        int: a.int && b.int,
    })
}

/// Resolves a possibly negative axis against a rank (a scalar has no axes).
pub fn axis(a: i64, rank: usize) -> Option<usize> {
    let r = rank as i64;
    let a = if a < 0 { a + r } else { a };
    (0..r).contains(&a).then_some(a as usize)
}

/// ONNX `Slice` of one axis of size `size`: the number of elements kept.
pub fn slice_len(size: u64, start: i64, end: i64, step: i64) -> Option<u64> {
    if step == 0 {
        return None;
    }
    let s = size as i128;
    let clamp = |v: i64, lo: i128, hi: i128| {
        let v = v as i128;
        let v = if v < 0 { v + s } else { v };
        v.clamp(lo, hi)
    };
    let n = if step > 0 {
        let (b, e) = (clamp(start, 0, s), clamp(end, 0, s));
        if e > b {
            (e - b + step as i128 - 1) / step as i128
        } else {
            0
        }
    } else {
        let (b, e) = (clamp(start, -1, s - 1), clamp(end, -1, s - 1));
        if b > e {
            (b - e + (-step) as i128 - 1) / (-step) as i128
        } else {
            0
        }
    };
    Some(n as u64)
}

/// ONNX `Reshape` target: `0` copies the input dim (unless `allowzero`), one `-1` is inferred.
pub fn reshape_dims(input: &[u64], target: &[i64]) -> Option<Vec<u64>> {
    let total: u64 = input.iter().try_fold(1u64, |a, &d| a.checked_mul(d))?;
    let mut out = Vec::with_capacity(target.len());
    let mut infer = None;
    for (i, &t) in target.iter().enumerate() {
        match t {
            0 => out.push(*input.get(i)?),
            -1 if infer.is_none() => {
                infer = Some(i);
                out.push(1);
            }
            t if t > 0 => out.push(t as u64),
            _ => return None,
        }
    }
    let known: u64 = out.iter().try_fold(1u64, |a, &d| a.checked_mul(d))?;
    if let Some(i) = infer {
        if known == 0 || !total.is_multiple_of(known) {
            return None;
        }
        out[i] = total / known;
    } else if known != total {
        return None;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_and_reshapes() {
        assert_eq!(slice_len(10, 0, 1, 1), Some(1));
        assert_eq!(slice_len(10, 2, i64::MAX, 1), Some(8));
        assert_eq!(slice_len(10, -3, i64::MAX, 1), Some(3));
        assert_eq!(slice_len(10, 0, 10, 2), Some(5));
        assert_eq!(slice_len(10, -1, i64::MIN, -1), Some(10));
        assert_eq!(slice_len(10, 0, 1, 0), None);
        assert_eq!(reshape_dims(&[2, 3, 4], &[0, -1]), Some(vec![2, 12]));
        assert_eq!(reshape_dims(&[2, 3, 4], &[5, -1]), None);
        assert_eq!(reshape_dims(&[2, 3, 4], &[-1, -1]), None);
    }
}
