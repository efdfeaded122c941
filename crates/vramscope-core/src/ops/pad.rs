//! `F.pad(x, ..., mode="constant")`: a new padded tensor (also when every pad is zero); backward
//! (`ConstantPadNdBackward0`) is `constant_pad_nd` with the negated pads, a new tensor of the
//! input's size (also when every pad is zero).

use super::*;

/// Constant padding of trailing dimensions.
#[derive(Debug, Clone)]
pub struct ConstantPad {
    /// (before, after) per dimension from the last backwards, as `F.pad` takes them.
    pub pads: Vec<(u64, u64)>,
}

impl Op for ConstantPad {
    fn kind(&self) -> &'static str {
        "pad"
    }

    fn output_shapes(&self, inputs: &[&[u64]]) -> Result<Vec<Shape>, ShapeError> {
        let mut s = inputs[0].to_vec();
        if self.pads.len() > s.len() {
            return Err(ShapeError::new(
                "pad",
                format!("{} pads for shape {s:?}", self.pads.len()),
            ));
        }
        let n = s.len();
        for (i, (a, b)) in self.pads.iter().enumerate() {
            s[n - 1 - i] += a + b;
        }
        Ok(vec![s])
    }
}
