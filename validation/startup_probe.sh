#!/usr/bin/env bash
# What a process start costs on this machine, for docs/performance.md's start-up entries: a C
# program that returns at once, linked against libc only and with libgcc_s and libm forced in
# (--no-as-needed: what the binary needed before build.rs linked the unwinder statically and the
# `libm` crate replaced libm.so), and a Rust hello-world with `fn main` and with `#![no_main]`
# (glibc calling `main` directly, as the CLI does). Times them with validation/ab_runs.py.
#   bash validation/startup_probe.sh [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-500}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo 'int main(void) { return 0; }' > "$tmp/ret.c"
cc -O2 "$tmp/ret.c" -o "$tmp/c_libc"
cc -O2 "$tmp/ret.c" -o "$tmp/c_gcc_s_m" -Wl,--no-as-needed -lgcc_s -lm
echo 'fn main() { println!("hi"); }' > "$tmp/std_main.rs"
cat > "$tmp/no_main.rs" <<'RS'
#![no_main]
#[no_mangle]
pub extern "C" fn main(_argc: i32, _argv: *const *const u8) -> i32 {
    println!("hi");
    0
}
RS
rustc -O --edition 2021 "$tmp/std_main.rs" -o "$tmp/rust_main"
rustc -O --edition 2021 "$tmp/no_main.rs" -o "$tmp/rust_no_main"
python3 validation/ab_runs.py "$runs" /bin/true "$tmp/c_libc" "$tmp/c_gcc_s_m" "$tmp/rust_main" "$tmp/rust_no_main"
