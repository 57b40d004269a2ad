#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tokbench_fuzz::cmsg(data));
