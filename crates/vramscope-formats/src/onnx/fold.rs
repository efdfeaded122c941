//! Constant folding: a node whose inputs are all constants (shape arithmetic, masks, scalars)
//! is evaluated when the graph is built; values are kept for small constants (`consts.rs`).

use super::consts::{self, Konst};
use super::lower::{attr, attr_i, attr_ints, broadcast_dims, input_name, u, Lowerer, R};
use super::proto::{attribute_proto::AttributeType, NodeProto};

impl Lowerer<'_> {
    /// Constant folding of a node whose inputs are all constants; `None` when the op is not one
    /// that can be folded.
    pub(super) fn fold(&self, n: &NodeProto) -> R<Option<Konst>> {
        let inp = |i: usize| input_name(n, i);
        let k = |i: usize| {
            self.konst(inp(i))
                .ok_or_else(|| format!("input `{}` is not a known constant", inp(i)))
        };
        let bin = |f: &dyn Fn(f64, f64) -> f64| -> R<Konst> {
            consts::binary(&k(0)?, &k(1)?, f).ok_or_else(|| "shapes do not broadcast".into())
        };
        let unary = |f: &dyn Fn(f64) -> f64| -> R<Konst> {
            let x = k(0)?;
            Ok(Konst {
                vals: x.vals.as_ref().map(|v| v.iter().map(|&a| f(a)).collect()),
                ..x
            })
        };
        let op = n.op_type();
        Ok(Some(match op {
            "Constant" => {
                let a = n.attribute.first().ok_or("Constant without a value")?;
                match Some(a.r#type()) {
                    Some(AttributeType::Tensor) => {
                        let t = a.t.as_ref().ok_or("Constant without a tensor")?;
                        consts::decode(t, None).ok_or("bad constant tensor")?
                    }
                    Some(AttributeType::Float) => Konst {
                        dims: vec![],
                        vals: Some(vec![a.f() as f64]),
                        int: false,
                    },
                    Some(AttributeType::Int) => Konst {
                        dims: vec![],
                        vals: Some(vec![a.i() as f64]),
                        int: true,
                    },
                    Some(AttributeType::Ints) => Konst::ints(&a.ints),
                    Some(AttributeType::Floats) => Konst {
                        dims: vec![a.floats.len() as u64],
                        vals: Some(a.floats.iter().map(|&f| f as f64).collect()),
                        int: false,
                    },
                    _ => return Err("unsupported Constant attribute".into()),
                }
            }
            "Identity" => k(0)?,
            "Shape" | "Size" => {
                let x = k(0)?;
                let d: Vec<i64> = x.dims.iter().map(|&v| v as i64).collect();
                if op == "Size" {
                    Konst {
                        dims: vec![],
                        vals: Some(vec![x.numel() as f64]),
                        int: true,
                    }
                } else {
                    let r = d.len() as i64;
                    let clampi = |v: i64| (if v < 0 { v + r } else { v }).clamp(0, r) as usize;
                    let start = clampi(attr_i(n, "start", 0));
                    let end = clampi(attr_i(n, "end", r));
                    Konst::ints(&d[start..end.max(start)])
                }
            }
            "ConstantOfShape" => {
                let dims: Vec<u64> = self
                    .ints(inp(0), "shape")?
                    .iter()
                    .map(|&d| u(d, "shape"))
                    .collect::<R<_>>()?;
                let v = attr(n, "value")
                    .and_then(|a| a.t.as_ref())
                    .and_then(|t| consts::decode(t, None));
                let fill = v.as_ref().and_then(Konst::scalar).unwrap_or(0.0);
                let mut kk = Konst {
                    dims,
                    vals: None,
                    int: v.is_some_and(|v| v.int),
                };
                if kk.numel() <= consts::MAX_VALUES {
                    kk.vals = Some(vec![fill; kk.numel() as usize]);
                }
                kk
            }
            "Cast" => {
                let mut x = k(0)?;
                x.int = consts::is_int_type(attr_i(n, "to", 1) as i32);
                if x.int {
                    x.vals = x.vals.map(|v| v.into_iter().map(f64::trunc).collect());
                }
                x
            }
            "Add" => bin(&|a, b| a + b)?,
            "Sub" => bin(&|a, b| a - b)?,
            "Mul" => bin(&|a, b| a * b)?,
            "Div" => {
                let (a, c) = (k(0)?, k(1)?);
                let int = a.int && c.int;
                consts::binary(&a, &c, move |a, b| {
                    if b == 0.0 {
                        0.0
                    } else if int {
                        (a / b).floor()
                    } else {
                        a / b
                    }
                })
                .ok_or("shapes do not broadcast")?
            }
            "Mod" => {
                let fmod = attr_i(n, "fmod", 0) != 0;
                bin(&move |a, b| {
                    if b == 0.0 {
                        0.0
                    } else if fmod {
                        a % b
                    } else {
                        ((a % b) + b) % b
                    }
                })?
            }
            "Pow" => bin(&libm::pow)?,
            "Min" if n.input.len() == 2 => bin(&f64::min)?,
            "Max" if n.input.len() == 2 => bin(&f64::max)?,
            "Equal" => bin(&|a, b| (a == b) as u8 as f64)?,
            "Less" => bin(&|a, b| (a < b) as u8 as f64)?,
            "Greater" => bin(&|a, b| (a > b) as u8 as f64)?,
            "LessOrEqual" => bin(&|a, b| (a <= b) as u8 as f64)?,
            "GreaterOrEqual" => bin(&|a, b| (a >= b) as u8 as f64)?,
            "And" => bin(&|a, b| (a != 0.0 && b != 0.0) as u8 as f64)?,
            "Or" => bin(&|a, b| (a != 0.0 || b != 0.0) as u8 as f64)?,
            "Not" => unary(&|a| (a == 0.0) as u8 as f64)?,
            "Sqrt" => unary(&f64::sqrt)?,
            "Neg" => unary(&|a| -a)?,
            "Abs" => unary(&f64::abs)?,
            "Floor" => unary(&f64::floor)?,
            "Ceil" => unary(&f64::ceil)?,
            "Round" => unary(&f64::round_ties_even)?,
            "Reciprocal" => unary(&|a| if a == 0.0 { 0.0 } else { 1.0 / a })?,
            "Exp" => unary(&libm::exp)?,
            "Log" => unary(&libm::log)?,
            "Sign" => unary(&|a| if a == 0.0 { 0.0 } else { a.signum() })?,
            "IsNaN" => unary(&|a| a.is_nan() as u8 as f64)?,
            "Trilu" => {
                // lower/upper triangle of a matrix (the exporter's causal mask): values only for
                // small masks, which nothing reads anyway
                let x = k(0)?;
                Konst { vals: None, ..x }
            }
            "Where" => {
                let (c, a, bb) = (k(0)?, k(1)?, k(2)?);
                let dims = broadcast_dims(&broadcast_dims(&c.dims, &a.dims)?, &bb.dims)?;
                let n_out = dims
                    .iter()
                    .try_fold(1u64, |a, &d| a.checked_mul(d))
                    .unwrap_or(u64::MAX);
                // values when each operand is a scalar or already of the output's size
                let at = |k: &Konst, i: usize| -> Option<f64> {
                    let v = k.vals.as_ref()?;
                    match v.len() as u64 {
                        1 => v.first().copied(),
                        l if l == n_out => v.get(i).copied(),
                        _ => None,
                    }
                };
                let vals = (n_out <= consts::MAX_VALUES)
                    .then(|| {
                        (0..n_out as usize)
                            .map(|i| {
                                Some(if at(&c, i)? != 0.0 {
                                    at(&a, i)?
                                } else {
                                    at(&bb, i)?
                                })
                            })
                            .collect::<Option<Vec<f64>>>()
                    })
                    .flatten();
                Konst {
                    dims,
                    vals,
                    int: a.int && bb.int,
                }
            }
            "Expand" => {
                let x = k(0)?;
                let t: Vec<u64> = self
                    .ints(inp(1), "shape")?
                    .iter()
                    .map(|&d| d.max(1) as u64)
                    .collect();
                let dims = broadcast_dims(&x.dims, &t)?;
                let mut kk = Konst {
                    dims,
                    vals: None,
                    int: x.int,
                };
                if let Some(v) = x.scalar() {
                    if kk.numel() <= consts::MAX_VALUES {
                        kk.vals = Some(vec![v; kk.numel() as usize]);
                    }
                }
                kk
            }
            "Transpose" => {
                let x = k(0)?;
                let r = x.dims.len();
                let perm = attr_ints(n, "perm").unwrap_or_else(|| (0..r as i64).rev().collect());
                let dims: Vec<u64> = perm
                    .iter()
                    .map(|&p| consts::axis(p, r).map(|a| x.dims[a]))
                    .collect::<Option<_>>()
                    .ok_or("perm out of range")?;
                let same = perm.iter().enumerate().all(|(i, &p)| p == i as i64);
                Konst {
                    dims,
                    vals: if same { x.vals } else { None },
                    int: x.int,
                }
            }
            "Unsqueeze" | "Squeeze" | "Reshape" | "Flatten" => {
                let x = k(0)?;
                let dims = self.view_shape(n, &x.dims)?;
                Konst { dims, ..x }
            }
            "Concat" => {
                let parts: Vec<Konst> = (0..n.input.len()).map(k).collect::<R<_>>()?;
                let first = parts.first().ok_or("Concat without inputs")?;
                let r = first.dims.len();
                let ax = consts::axis(attr_i(n, "axis", 0), r).ok_or("axis out of range")?;
                if parts.iter().any(|p| {
                    p.dims.len() != r
                        || p.dims
                            .iter()
                            .enumerate()
                            .any(|(i, &d)| i != ax && d != first.dims[i])
                }) {
                    return Err("constants to concatenate differ outside the axis".into());
                }
                let mut dims = first.dims.clone();
                dims[ax] = parts.iter().map(|p| p.dims[ax]).sum();
                let vals = if r == 1 {
                    parts
                        .iter()
                        .map(|p| p.vals.clone())
                        .collect::<Option<Vec<_>>>()
                        .map(|v| v.concat())
                } else {
                    None
                };
                Konst {
                    dims,
                    vals,
                    int: parts.iter().all(|p| p.int),
                }
            }
            "Gather" => {
                let (x, i) = (k(0)?, k(1)?);
                let idx = i.as_ints().ok_or("unknown indices")?;
                let ax =
                    consts::axis(attr_i(n, "axis", 0), x.dims.len()).ok_or("axis out of range")?;
                if x.dims.len() != 1 {
                    // a gather from a larger constant (a weight): its shape only
                    let mut dims = x.dims[..ax].to_vec();
                    dims.extend(&i.dims);
                    dims.extend(&x.dims[ax + 1..]);
                    return Ok(Some(Konst {
                        dims,
                        vals: None,
                        int: x.int,
                    }));
                }
                let v = x.vals.as_ref().ok_or("unknown values")?;
                let len = v.len() as i64;
                let picked: Vec<f64> = idx
                    .iter()
                    .map(|&j| {
                        let j = if j < 0 { j + len } else { j };
                        usize::try_from(j).ok().and_then(|j| v.get(j).copied())
                    })
                    .collect::<Option<_>>()
                    .ok_or("index out of range")?;
                Konst {
                    dims: i.dims.clone(),
                    vals: Some(picked),
                    int: x.int,
                }
            }
            "Slice" => {
                let x = k(0)?;
                let (dims, _) = self.slice_shape(n, &x.dims)?;
                let vals = if x.dims.len() == 1 {
                    let (st, en) = (self.ints(inp(1), "starts")?, self.ints(inp(2), "ends")?);
                    let step = if inp(4).is_empty() {
                        1
                    } else {
                        self.ints(inp(4), "steps")?.first().copied().unwrap_or(1)
                    };
                    x.vals.as_ref().and_then(|v| {
                        let len = v.len() as i64;
                        let s0 = st.first().copied()?;
                        let s0 = if s0 < 0 { s0 + len } else { s0 }.clamp(0, len);
                        let e0 = en.first().copied()?;
                        let e0 = if e0 < 0 { e0 + len } else { e0 }.clamp(0, len);
                        (step == 1).then(|| v[s0 as usize..e0.max(s0) as usize].to_vec())
                    })
                } else {
                    None
                };
                Konst {
                    dims,
                    vals,
                    int: x.int,
                }
            }
            "Range" => {
                let (s, l, d) = (
                    k(0)?.scalar().ok_or("start")?,
                    k(1)?.scalar().ok_or("limit")?,
                    k(2)?.scalar().ok_or("delta")?,
                );
                if d == 0.0 {
                    return Err("delta 0".into());
                }
                let cnt = ((l - s) / d).ceil().max(0.0);
                if cnt > 1e12 {
                    return Err(format!("Range of {cnt} elements"));
                }
                let cnt = cnt as u64;
                let mut kk = Konst {
                    dims: vec![cnt],
                    vals: None,
                    int: true,
                };
                if cnt <= consts::MAX_VALUES {
                    kk.vals = Some((0..cnt).map(|i| s + i as f64 * d).collect());
                }
                kk
            }
            _ => return Ok(None),
        }))
    }
}
