//! Generates the prost code for onnx.proto from a FileDescriptorSet (made by any protoc, e.g.
//! `python -m grpc_tools.protoc`), so that no protoc is needed at build time.
use prost::Message;

fn main() {
    let mut args = std::env::args().skip(1);
    let fds_path = args.next().expect("usage: onnx-proto-gen FDS OUT_DIR");
    let out_dir = args.next().expect("usage: onnx-proto-gen FDS OUT_DIR");
    let bytes = std::fs::read(&fds_path).expect("read descriptor set");
    let fds = prost_types::FileDescriptorSet::decode(bytes.as_slice()).expect("decode descriptor set");
    prost_build::Config::new()
        .out_dir(&out_dir)
        // bytes fields (raw_data) borrow the memory map instead of copying
        .bytes(["."])
        .compile_fds(fds)
        .expect("generate");
}
