//! A layer's key or value cache growing, as transformers' `DynamicLayer.update` does it:
//! `self.keys = torch.cat([self.keys, key_states], dim=-2)`, a new tensor holding the old cache
//! and the new positions (the old one is freed once nothing else holds it). The first update
//! concatenates onto an empty tensor made in the keys' dtype (`torch.tensor([],
//! dtype=key_states.dtype)`), which is a copy of the new states promoted to that dtype: under
//! autocast a Llama's rotated keys are float32, so its bfloat16 values are cached in float32 too.
//! Its output is the cache, reported as its own category. Backward (a forward that fills a cache
//! while training) hands the new states a narrow view of the gradient.

use super::*;

/// `cat([cache, new], dim=-2)` on `[B, H, L, D]` tensors, in the promoted dtype. `first`: the
/// first update, a copy of input 0 (the new states) promoted with input 1 (the keys, whose dtype
/// the empty cache has; absent for the keys themselves). `grow_to` makes a cache of that length
/// out of one input instead: the simulator's jump over decode steps it does not run one by one.
#[derive(Debug, Clone)]
pub struct KvCacheUpdate {
    /// The first update (see the type's docs).
    pub first: bool,
    /// Length of the output along the sequence dimension, when it is not the inputs' sum.
    pub grow_to: Option<u64>,
}

impl Op for KvCacheUpdate {
    fn kind(&self) -> &'static str {
        "cat"
    }

    fn output_shapes(&self, inputs: &[&[u64]]) -> Result<Vec<Shape>, ShapeError> {
        let first = expect_rank("cat", inputs, 0, 4)?;
        let mut out = first.to_vec();
        if self.first {
            return Ok(vec![out]);
        }
        if let Some(l) = self.grow_to {
            if l < first[2] {
                return Err(ShapeError::new(
                    "cat",
                    format!("a cache of {} positions cannot shrink to {l}", first[2]),
                ));
            }
            out[2] = l;
            return Ok(vec![out]);
        }
        for s in &inputs[1..] {
            if s.len() != 4 || s[0] != first[0] || s[1] != first[1] || s[3] != first[3] {
                return Err(ShapeError::new(
                    "cat",
                    format!("cache {first:?} and new states {s:?} differ outside dimension 2"),
                ));
            }
            out[2] += s[2];
        }
        Ok(vec![out])
    }

    fn output_dtypes(&self, inputs: &[DType], n: usize) -> Vec<DType> {
        let d = inputs
            .iter()
            .copied()
            .reduce(DType::promote)
            .unwrap_or(DType::F32);
        vec![d; n]
    }

    // `CatBackward0` when a forward that fills the cache is trained (the per-token heads' base
    // model runs with the config's `use_cache`), as `cat`'s (the first update's promotion under
    // autocast makes a cast); the keys a first value update reads only for their dtype get none
    fn input_grads(&self, ctx: &OpCtx) -> Vec<GradIn> {
        ctx.inputs
            .iter()
            .enumerate()
            .map(|(i, t)| {
                if self.first && i > 0 {
                    GradIn::None
                } else {
                    super::cat::cat_input_grad(t.dtype, ctx.outputs[0].dtype)
                }
            })
            .collect()
    }

    fn is_kv_cache(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_along_the_sequence_and_checks_the_rest() {
        let op = KvCacheUpdate {
            first: false,
            grow_to: None,
        };
        let s = op
            .output_shapes(&[&[2, 4, 10, 64], &[2, 4, 1, 64]])
            .unwrap();
        assert_eq!(s, vec![vec![2, 4, 11, 64]]);
        assert!(op
            .output_shapes(&[&[2, 4, 10, 64], &[2, 8, 1, 64]])
            .is_err());
        let jump = KvCacheUpdate {
            first: false,
            grow_to: Some(40),
        };
        assert_eq!(
            jump.output_shapes(&[&[2, 4, 10, 64]]).unwrap(),
            vec![vec![2, 4, 40, 64]]
        );
        assert!(KvCacheUpdate {
            first: false,
            grow_to: Some(5)
        }
        .output_shapes(&[&[2, 4, 10, 64]])
        .is_err());
    }

    #[test]
    fn the_first_values_take_the_keys_dtype() {
        let op = KvCacheUpdate {
            first: true,
            grow_to: None,
        };
        assert_eq!(
            op.output_shapes(&[&[2, 4, 10, 64], &[2, 4, 10, 64]])
                .unwrap(),
            vec![vec![2, 4, 10, 64]]
        );
        assert_eq!(
            op.output_dtypes(&[DType::BF16, DType::F32], 1),
            [DType::F32]
        );
    }
}
