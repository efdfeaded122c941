//! Module paths from the exporter's node-name scopes: `torch.onnx.export` names a node
//! `/layer1/layer1.0/conv1/Conv`, one segment per module call, each segment relative to some
//! ancestor (`features.1/block/block.0`), and a repeated call of a module gets `_N` (`relu_1`).

use std::collections::HashSet;

/// Resolves node names to module paths, remembering the paths it has seen.
#[derive(Debug, Default)]
pub struct ScopeResolver {
    seen: HashSet<String>,
}

/// One module call level of a node: the raw call name (to tell calls apart) and the module path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Level {
    /// Segment as written (`relu_1`).
    pub call: String,
    /// Dotted module path (`layer1.0.relu`).
    pub path: String,
}

impl ScopeResolver {
    /// The module levels of a node named `name` (empty for names without `/` scopes).
    pub fn levels(&mut self, name: &str) -> Vec<Level> {
        if !name.starts_with('/') {
            return Vec::new();
        }
        let segs: Vec<&str> = name[1..].split('/').collect();
        let mut out: Vec<Level> = Vec::new();
        let mut parent = String::new();
        // the last segment is the op itself (`Conv`, `Conv_1`)
        for seg in &segs[..segs.len().saturating_sub(1)] {
            if seg.is_empty() {
                continue;
            }
            let path = self.resolve(&parent, seg);
            out.push(Level {
                call: format!("{parent}/{seg}"),
                path: path.clone(),
            });
            parent = path;
        }
        out
    }

    fn resolve(&mut self, parent: &str, seg: &str) -> String {
        // the first ancestor (from the root) under which `seg` names a descendant of `parent`
        let mut ancestors = vec![String::new()];
        for (i, c) in parent.char_indices() {
            if c == '.' {
                ancestors.push(parent[..i].to_string());
            }
        }
        if !parent.is_empty() {
            ancestors.push(parent.to_string());
        }
        let join = |a: &str, s: &str| {
            if a.is_empty() {
                s.to_string()
            } else {
                format!("{a}.{s}")
            }
        };
        let mut path = join(parent, seg);
        for a in &ancestors {
            let cand = join(a, seg);
            if parent.is_empty() || cand.starts_with(&format!("{parent}.")) {
                path = cand;
                break;
            }
        }
        // `relu_1`: a repeated call of `relu`, when `relu` was called before
        if let Some((base, n)) = path.rsplit_once('_') {
            if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) && self.seen.contains(base) {
                return base.to_string();
            }
        }
        self.seen.insert(path.clone());
        path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(r: &mut ScopeResolver, name: &str) -> Vec<String> {
        r.levels(name).into_iter().map(|l| l.path).collect()
    }

    #[test]
    fn torchvision_scopes() {
        let mut r = ScopeResolver::default();
        assert_eq!(
            paths(&mut r, "/layer1/layer1.0/conv1/Conv"),
            ["layer1", "layer1.0", "layer1.0.conv1"]
        );
        assert_eq!(
            paths(&mut r, "/layer1/layer1.0/relu/Relu"),
            ["layer1", "layer1.0", "layer1.0.relu"]
        );
        assert_eq!(
            paths(&mut r, "/layer1/layer1.0/relu_1/Relu"),
            ["layer1", "layer1.0", "layer1.0.relu"]
        );
        assert_eq!(
            paths(&mut r, "/features/features.1/block/block.0/block.0.0/Conv"),
            [
                "features",
                "features.1",
                "features.1.block",
                "features.1.block.0",
                "features.1.block.0.0"
            ]
        );
        assert_eq!(paths(&mut r, "/Flatten"), Vec::<String>::new());
        assert_eq!(paths(&mut r, "node_7"), Vec::<String>::new());
        // a module really named `conv_1` is kept when no `conv` was seen
        assert_eq!(paths(&mut r, "/conv_1/Conv"), ["conv_1"]);
    }
}
