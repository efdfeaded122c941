//! The attention mask Swin builds in every shifted-window block (torchvision's
//! `shifted_window_attention`): `x.new_zeros((pad_H, pad_W))` filled with region ids, viewed into
//! windows and copied (`reshape`), the pairwise difference `[nW, N, N]` (`sub`), then
//! `masked_fill(diff != 0, -100).masked_fill(diff == 0, 0)` (two bool masks and two filled
//! tensors). No gradient flows into it; the final mask lives until the attention returns.
//!
//! Modelled as one op: the final mask is the output; the intermediate tensors are transients
//! (allocated and freed one after the other, so their brief overlap inside the statement — at
//! most three `[nW, N, N]` tensors besides the output — is not reproduced).

use super::*;

/// The `[nW, N, N]` shifted-window attention mask, in the dtype of input 0 (the windows).
#[derive(Debug, Clone)]
pub struct ShiftedWindowMask {
    /// Padded feature map (height, width).
    pub padded: (u64, u64),
    /// Window (height, width).
    pub window: (u64, u64),
}

impl ShiftedWindowMask {
    fn windows(&self) -> u64 {
        (self.padded.0 / self.window.0) * (self.padded.1 / self.window.1)
    }

    fn n(&self) -> u64 {
        self.window.0 * self.window.1
    }
}

impl Op for ShiftedWindowMask {
    fn kind(&self) -> &'static str {
        "attn_mask"
    }

    fn output_shapes(&self, _inputs: &[&[u64]]) -> Result<Vec<Shape>, ShapeError> {
        if self.window.0 == 0
            || self.window.1 == 0
            || self.windows() * self.n() != self.padded.0 * self.padded.1
        {
            return Err(ShapeError::new(
                "attn_mask",
                format!(
                    "padded size {:?} is not a multiple of the window {:?}",
                    self.padded, self.window
                ),
            ));
        }
        Ok(vec![vec![self.windows(), self.n(), self.n()]])
    }

    fn differentiable(&self) -> bool {
        false
    }

    // new_zeros, its window copy, the difference, `!= 0`, the first fill, `== 0`
    fn forward_temporaries(&self, ctx: &OpCtx) -> Vec<u64> {
        let e = ctx.outputs[0].dtype.size();
        let map = self.padded.0 * self.padded.1 * e;
        let full = self.windows() * self.n() * self.n();
        vec![map, map, full * e, full, full * e, full]
    }
}
