//! What the `vramscope` binary costs before `main`: the shared libraries the dynamic loader
//! maps at every start (each about 0.08 ms on the development VM, docs/performance.md).

/// `DT_NEEDED` names of an ELF64 little-endian executable, read from its dynamic segment.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn needed_libraries(elf: &[u8]) -> Vec<String> {
    let u16_at = |at: usize| u16::from_le_bytes(elf[at..at + 2].try_into().unwrap()) as usize;
    let u64_at = |at: usize| u64::from_le_bytes(elf[at..at + 8].try_into().unwrap());
    assert_eq!(&elf[..4], b"\x7fELF", "not an ELF file");
    assert_eq!(
        (elf[4], elf[5]),
        (2, 1),
        "not a 64-bit little-endian ELF file"
    );
    let (phoff, phentsize, phnum) = (u64_at(0x20) as usize, u16_at(0x36), u16_at(0x38));
    let headers: Vec<&[u8]> = (0..phnum)
        .map(|i| &elf[phoff + i * phentsize..][..phentsize])
        .collect();
    let p_type = |h: &[u8]| u32::from_le_bytes(h[..4].try_into().unwrap());
    let field = |h: &[u8], at: usize| u64::from_le_bytes(h[at..at + 8].try_into().unwrap());
    // (offset, vaddr, filesz) of a segment
    let segment = |h: &[u8]| (field(h, 8), field(h, 16), field(h, 32));
    // a virtual address's file offset, through the loadable segment that holds it
    let file_offset = |vaddr: u64| {
        headers
            .iter()
            .filter(|h| p_type(h) == 1)
            .map(|h| segment(h))
            .find(|&(_, start, size)| (start..start + size).contains(&vaddr))
            .map(|(offset, start, _)| (vaddr - start + offset) as usize)
            .expect("the string table lies in a loadable segment")
    };
    let Some(dynamic) = headers.iter().find(|h| p_type(h) == 2) else {
        return Vec::new(); // linked statically
    };
    let (offset, _, size) = segment(dynamic);
    let entries: Vec<(u64, u64)> = elf[offset as usize..][..size as usize]
        .chunks_exact(16)
        .map(|e| (field(e, 0), field(e, 8)))
        .take_while(|&(tag, _)| tag != 0)
        .collect();
    let strtab = file_offset(entries.iter().find(|e| e.0 == 5).expect("DT_STRTAB").1);
    entries
        .iter()
        .filter(|e| e.0 == 1)
        .map(|&(_, name)| {
            let s = &elf[strtab + name as usize..];
            String::from_utf8_lossy(&s[..s.iter().position(|&b| b == 0).unwrap()]).into_owned()
        })
        .collect()
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[test]
fn the_binary_loads_only_the_c_library() {
    let elf = std::fs::read(env!("CARGO_BIN_EXE_vramscope")).unwrap();
    let needed = needed_libraries(&elf);
    // libgcc_s (the unwinder, linked statically by build.rs) and libm (exp / ln / pow, from the
    // libm crate) would each add a library to every start; the dynamic loader is mapped anyway
    // (a debug build names it); NVML is loaded with dlopen
    assert!(
        needed
            .iter()
            .all(|lib| lib.starts_with("libc.so") || lib.starts_with("ld-linux")),
        "the binary needs {needed:?}"
    );
}
