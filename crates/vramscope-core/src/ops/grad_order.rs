//! The order in which an autograd function makes its inputs' gradients: it decides which
//! gradient is allocated first, so where each lands in the caching allocator's pool.

/// The order in which backward allocates the gradients of an op's inputs (its graph inputs,
/// then its parameters), as the generated `*Backward0::apply` computes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GradOrder {
    /// First input first (most functions; `linear` with a bias: input, weight, bias).
    #[default]
    LeftToRight,
    /// Last input first (`mm`/`bmm` make mat2's gradient before mat1's; a bias-free linear).
    RightToLeft,
    /// The second input first and the first input last: `addmm(bias, mat1, mat2)` makes mat1's
    /// and mat2's gradients, then the bias's (the incoming gradient summed down to its shape).
    FirstLast,
}

impl GradOrder {
    /// The input whose gradient is made at `step` (0-based) of `n`.
    pub fn input_at(self, step: usize, n: usize) -> usize {
        match self {
            GradOrder::LeftToRight => step,
            GradOrder::RightToLeft => n - 1 - step,
            GradOrder::FirstLast => (step + 1) % n,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_order_visits_every_input_once() {
        let order = |o: GradOrder, n| (0..n).map(|s| o.input_at(s, n)).collect::<Vec<_>>();
        assert_eq!(order(GradOrder::LeftToRight, 3), [0, 1, 2]);
        assert_eq!(order(GradOrder::RightToLeft, 3), [2, 1, 0]);
        assert_eq!(order(GradOrder::FirstLast, 3), [1, 2, 0]);
        assert_eq!(order(GradOrder::FirstLast, 1), [0]);
    }
}
