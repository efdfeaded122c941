//! Swin's `relative_position_bias_table[relative_position_index]`: an `index` gather of the
//! `[(2Wh-1)(2Ww-1), heads]` parameter table by the int64 buffer of `(Wh·Ww)²` indices, giving a
//! new `[(Wh·Ww)², heads]` tensor. Autograd keeps only the indices (a buffer); `IndexBackward0`
//! allocates a zero table (`new_zeros`) and returns `index_put` of the gradient into it (a new
//! table-sized tensor), freeing the zeros. The op owns both tensors, so its module registers them.

use super::*;

/// `table[index]` for a window of `window` and `heads` heads.
#[derive(Debug, Clone)]
pub struct RelativePositionBias {
    /// Window (height, width).
    pub window: (u64, u64),
    /// Attention heads.
    pub heads: u64,
}

impl RelativePositionBias {
    fn table_rows(&self) -> u64 {
        (2 * self.window.0 - 1) * (2 * self.window.1 - 1)
    }

    fn index_len(&self) -> u64 {
        let n = self.window.0 * self.window.1;
        n * n
    }
}

impl Op for RelativePositionBias {
    fn kind(&self) -> &'static str {
        "index"
    }

    fn output_shapes(&self, _inputs: &[&[u64]]) -> Result<Vec<Shape>, ShapeError> {
        if self.window.0 == 0 || self.window.1 == 0 {
            return Err(ShapeError::new("index", "the window must not be empty"));
        }
        Ok(vec![vec![self.index_len(), self.heads]])
    }

    fn param_specs(&self) -> Vec<ParamSpec> {
        vec![
            ParamSpec::param(
                "relative_position_bias_table",
                vec![self.table_rows(), self.heads],
            ),
            ParamSpec {
                name: "relative_position_index",
                shape: vec![self.index_len()],
                is_buffer: true,
                fixed_dtype: Some(DType::I64),
            },
        ]
    }

    fn output_dtypes(&self, _inputs: &[DType], n: usize) -> Vec<DType> {
        vec![DType::F32; n]
    }

    // the zero table that index_put writes into
    fn backward_temporaries(&self, ctx: &OpCtx) -> Vec<u64> {
        ctx.params
            .first()
            .map(TensorMeta::bytes)
            .into_iter()
            .collect()
    }
}
