//! `x.mean(dims, keepdim)`: saves only sizes; backward expands and divides (a new full-size tensor).

use super::*;

/// Mean over some dimensions.
#[derive(Debug, Clone)]
pub struct Mean {
    /// Reduced dimensions (non-negative).
    pub dims: Vec<usize>,
    /// `keepdim`.
    pub keepdim: bool,
}

impl Op for Mean {
    fn kind(&self) -> &'static str {
        "mean"
    }

    fn output_shapes(&self, inputs: &[&[u64]]) -> Result<Vec<Shape>, ShapeError> {
        let s = inputs[0];
        if let Some(&d) = self.dims.iter().find(|&&d| d >= s.len()) {
            return Err(ShapeError::new(
                "mean",
                format!("dimension {d} out of range for shape {s:?}"),
            ));
        }
        let mut o = Vec::new();
        for (i, &n) in s.iter().enumerate() {
            if self.dims.contains(&i) {
                if self.keepdim {
                    o.push(1);
                }
            } else {
                o.push(n);
            }
        }
        Ok(vec![o])
    }
}
