//! `estimate --explain`: for every phase, what was allocated and freed, grouped by what made it,
//! with numbers that add up to the phase timeline (allocator block bytes).

use std::collections::BTreeMap;

use crate::json::EstimateReport;
use crate::table::{human, phase_reason};
use vramscope_core::sim::{Category, Simulation};

#[derive(Default)]
struct Group {
    allocated: u64,
    freed: u64,
    count_alloc: u32,
    count_free: u32,
}

/// A category as the text reports name it.
pub(crate) fn category_name(c: Category) -> &'static str {
    match c {
        Category::Parameters => "parameters",
        Category::Buffers => "buffers",
        Category::Gradients => "gradients",
        Category::OptimizerStates => "optimizer states",
        Category::Activations => "activations",
        Category::Recomputed => "recomputed activations",
        Category::Temporaries => "temporaries",
        Category::Inputs => "inputs",
        Category::KvCache => "KV cache",
    }
}

/// Renders the per-phase explanation. `sim` must come from a run with `record_events`.
pub fn render_explain(sim: &Simulation, report: &EstimateReport, max_lines: usize) -> String {
    let mut out = String::from("What each phase allocated and freed (allocator block bytes):\n");
    let mut before = 0u64;
    for (i, p) in sim.phases.iter().enumerate() {
        let mut groups: BTreeMap<(&'static str, String), Group> = BTreeMap::new();
        for e in sim.events.iter().filter(|e| e.phase as usize == i) {
            let g = groups
                .entry((category_name(e.category), e.label.to_string()))
                .or_default();
            if e.alloc {
                g.allocated += e.block;
                g.count_alloc += 1;
            } else {
                g.freed += e.block;
                g.count_free += 1;
            }
        }
        let net = p.allocated_after as i64 - before as i64;
        out.push_str(&format!(
            "\n{}: {}{} (+{} allocated, -{} freed), peak {}\n",
            p.name,
            if net >= 0 { "+" } else { "-" },
            human(net.unsigned_abs()),
            human(p.allocated_bytes),
            human(p.freed_bytes),
            human(p.peak_allocated),
        ));
        let why = phase_reason(&p.name, net, report);
        if !why.is_empty() {
            out.push_str(&format!("  why: {why}\n"));
        }
        before = p.allocated_after;
        let mut rows: Vec<_> = groups.into_iter().collect();
        rows.sort_by_key(|(_, g)| std::cmp::Reverse(g.allocated.max(g.freed)));
        if rows.is_empty() {
            out.push_str("  nothing allocated or freed\n");
        }
        let n = rows.len();
        for ((cat, label), g) in rows.into_iter().take(max_lines) {
            let mut parts = Vec::new();
            if g.count_alloc > 0 {
                parts.push(format!(
                    "+{} in {} tensor{}",
                    human(g.allocated),
                    g.count_alloc,
                    plural(g.count_alloc)
                ));
            }
            if g.count_free > 0 {
                parts.push(format!(
                    "-{} in {} tensor{}",
                    human(g.freed),
                    g.count_free,
                    plural(g.count_free)
                ));
            }
            let kept = if g.count_alloc > 0 && g.count_free == 0 {
                " (all kept)"
            } else {
                ""
            };
            out.push_str(&format!(
                "  {cat:<22} {label:<28} {}{kept}\n",
                parts.join(", ")
            ));
        }
        if n > max_lines {
            out.push_str(&format!("  ... {} more groups\n", n - max_lines));
        }
    }
    out
}

fn plural(n: u32) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}
