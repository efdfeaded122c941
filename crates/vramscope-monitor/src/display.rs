//! Terminal pieces shared by `watch` and `run`: byte sizes, usage bars and sparklines.

/// Bytes as `812 MiB` / `12.34 GiB` (binary units, what `nvidia-smi` calls MiB).
pub fn human(bytes: u64) -> String {
    const MIB: f64 = (1u64 << 20) as f64;
    let mib = bytes as f64 / MIB;
    if mib >= 1024.0 {
        format!("{:.2} GiB", mib / 1024.0)
    } else if bytes >= 1 << 20 {
        format!("{mib:.0} MiB")
    } else {
        format!("{:.0} KiB", bytes as f64 / 1024.0)
    }
}

/// A usage bar `width` cells wide: `████▌░░░░░`; all `?` when unknown.
pub fn bar(used: Option<u64>, total: Option<u64>, width: usize) -> String {
    let (Some(used), Some(total)) = (used, total.filter(|&t| t > 0)) else {
        return "?".repeat(width);
    };
    let eighths = ((used.min(total) as f64 / total as f64) * (width * 8) as f64).round() as usize;
    const PARTIAL: [char; 8] = [' ', '▏', '▎', '▍', '▌', '▋', '▊', '▉'];
    let mut s = "█".repeat(eighths / 8);
    let partial = PARTIAL[eighths % 8];
    if partial != ' ' {
        s.push(partial);
    }
    let filled = s.chars().count();
    s.push_str(&"░".repeat(width.saturating_sub(filled)));
    s
}

/// A one-line chart of `values` at most `width` characters wide, from `▁` (zero) to `█` (the
/// maximum). When there are more values than characters, each character shows the highest value
/// of its stretch, so a short peak is never averaged away. Unknown values are spaces.
pub fn sparkline(values: &[Option<u64>], width: usize) -> String {
    const LEVELS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    if values.is_empty() || width == 0 {
        return String::new();
    }
    let cells = values.len().min(width);
    let buckets: Vec<Option<u64>> = (0..cells)
        .map(|c| {
            let (a, b) = (c * values.len() / cells, (c + 1) * values.len() / cells);
            values[a..b.max(a + 1)].iter().flatten().copied().max()
        })
        .collect();
    let max = buckets.iter().flatten().copied().max().unwrap_or(0);
    buckets
        .iter()
        .map(|v| match v {
            None => ' ',
            Some(_) if max == 0 => LEVELS[0],
            Some(v) => LEVELS[((*v as f64 / max as f64) * 7.0).round() as usize],
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(human(0), "0 KiB");
        assert_eq!(human(812 << 20), "812 MiB");
        assert_eq!(human(80 << 30), "80.00 GiB");
    }

    #[test]
    fn bars() {
        assert_eq!(bar(Some(0), Some(100), 4), "░░░░");
        assert_eq!(bar(Some(50), Some(100), 4), "██░░");
        assert_eq!(bar(Some(100), Some(100), 4), "████");
        assert_eq!(bar(Some(200), Some(100), 4), "████");
        assert_eq!(bar(Some(1), Some(16), 2), "▏░");
        assert_eq!(bar(None, Some(100), 3), "???");
        assert_eq!(bar(Some(1), Some(0), 3), "???");
    }

    #[test]
    fn sparkline_keeps_short_peaks() {
        let mut v = vec![Some(0); 100];
        v[57] = Some(1000);
        let s = sparkline(&v, 10);
        assert_eq!(s.chars().count(), 10);
        assert_eq!(s, "▁▁▁▁▁█▁▁▁▁");
        assert_eq!(sparkline(&[Some(0), Some(7), None, Some(14)], 20), "▁▅ █");
        assert_eq!(sparkline(&[], 5), "");
    }
}
