//! Tensor strides through views, so a `Reshape` copies exactly when PyTorch's `reshape` would
//! (`computeStride` of `aten/src/ATen/TensorUtils.cpp`) and a linear layer on a transposed input
//! takes the `matmul` path. Strides are in elements; a tensor without recorded strides is
//! contiguous.

/// Row-major strides of `shape`.
pub fn contiguous(shape: &[u64]) -> Vec<u64> {
    let mut s = vec![1u64; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1].saturating_mul(shape[i + 1].max(1));
    }
    s
}

/// `Tensor::is_contiguous()`: dims of size 1 may have any stride.
pub fn is_contiguous(shape: &[u64], strides: &[u64]) -> bool {
    let mut expected = 1u64;
    for (&n, &st) in shape.iter().zip(strides).rev() {
        if n == 1 {
            continue;
        }
        if st != expected {
            return false;
        }
        expected = expected.saturating_mul(n);
    }
    true
}

/// Strides after `permute(perm)`.
pub fn permute(strides: &[u64], perm: &[usize]) -> Vec<u64> {
    perm.iter()
        .map(|&p| strides.get(p).copied().unwrap_or(1))
        .collect()
}

/// The strides of `view(new_shape)` of a tensor of `shape`/`strides`, or `None` when the view is
/// impossible and `reshape` must copy (PyTorch's `computeStride`).
pub fn view(shape: &[u64], strides: &[u64], new_shape: &[u64]) -> Option<Vec<u64>> {
    if shape.is_empty() {
        return Some(vec![1; new_shape.len()]);
    }
    if shape.contains(&0) {
        return Some(contiguous(new_shape));
    }
    let mut new_strides = vec![0u64; new_shape.len()];
    let mut view_d = new_shape.len() as isize - 1;
    let mut chunk_base = *strides.last()?;
    let mut tensor_numel = 1u64;
    let mut view_numel = 1u64;
    for tensor_d in (0..shape.len()).rev() {
        tensor_numel = tensor_numel.saturating_mul(shape[tensor_d]);
        let chunk_ends = tensor_d == 0
            || (shape[tensor_d - 1] != 1
                && strides[tensor_d - 1] != tensor_numel.saturating_mul(chunk_base));
        if chunk_ends {
            while view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d as usize] == 1) {
                new_strides[view_d as usize] = view_numel.saturating_mul(chunk_base);
                view_numel = view_numel.saturating_mul(new_shape[view_d as usize]);
                view_d -= 1;
            }
            if view_numel != tensor_numel {
                return None;
            }
            if tensor_d > 0 {
                chunk_base = strides[tensor_d - 1];
                tensor_numel = 1;
                view_numel = 1;
            }
        }
    }
    (view_d == -1).then_some(new_strides)
}

/// The dims of `shape` ordered from the largest stride to the smallest, when the tensor is a
/// dense permutation of contiguous memory (what element-wise ops keep for their output).
pub fn dense_order(shape: &[u64], strides: &[u64]) -> Option<Vec<usize>> {
    let mut order: Vec<usize> = (0..shape.len()).collect();
    order.sort_by(|&a, &b| strides[b].cmp(&strides[a]).then(a.cmp(&b)));
    let permuted: Vec<u64> = order.iter().map(|&d| shape[d]).collect();
    let st: Vec<u64> = order.iter().map(|&d| strides[d]).collect();
    is_contiguous(&permuted, &st).then_some(order)
}

/// Dense strides for `shape` with its dims laid out in memory in `order` (outermost first).
pub fn with_order(shape: &[u64], order: &[usize]) -> Vec<u64> {
    let permuted: Vec<u64> = order.iter().map(|&d| shape[d]).collect();
    let c = contiguous(&permuted);
    let mut s = vec![1u64; shape.len()];
    for (k, &d) in order.iter().enumerate() {
        s[d] = c[k];
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn views_and_copies_follow_pytorch() {
        let s = [2, 3, 4];
        let c = contiguous(&s);
        assert_eq!(c, [12, 4, 1]);
        assert!(is_contiguous(&s, &c));
        // transpose(1, 2) then view back as [2, 12]: impossible
        let t = permute(&c, &[0, 2, 1]);
        assert!(!is_contiguous(&[2, 4, 3], &t));
        assert_eq!(view(&[2, 4, 3], &t, &[2, 12]), None);
        // splitting a dim of a transposed tensor is a view
        assert_eq!(view(&[2, 4, 3], &t, &[2, 2, 2, 3]), Some(vec![12, 2, 1, 4]));
        // [N*H, L, d] transposed from [L, N*H, d]: view as [N, H, L, d] works
        let lnd = contiguous(&[5, 6, 8]);
        let t = permute(&lnd, &[1, 0, 2]);
        assert_eq!(
            view(&[6, 5, 8], &t, &[2, 3, 5, 8]),
            Some(vec![24, 8, 48, 1])
        );
        // size-1 dims do not matter
        assert!(is_contiguous(&[1, 4], &[1, 1]));
        // dense permutations keep their order
        assert_eq!(dense_order(&[2, 4, 3], &[12, 1, 4]), Some(vec![0, 2, 1]));
        assert_eq!(with_order(&[2, 4, 3], &[0, 2, 1]), vec![12, 1, 4]);
    }
}
