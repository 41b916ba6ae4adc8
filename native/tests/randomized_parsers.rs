//! Seeded randomized runs of the byte parsers over mutated seeds from `fuzz/corpus/`: the GGUF
//! parser and the SSE frame parser must return or fail cleanly, never panic, on any input.
//! (The coverage-guided runs are the atheris targets in tests/native/fuzz_targets.py.)

use _native::frame::SseParser;
use _native::gguf::parse;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn seeds(target: &str) -> Vec<Vec<u8>> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus").join(target);
    let mut files: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    files.into_iter().map(|p| std::fs::read(p).unwrap()).collect()
}

fn mutate(rng: &mut Rng, data: &mut Vec<u8>) {
    for _ in 0..1 + rng.below(8) {
        let at = rng.below(data.len() + 1);
        match rng.below(5) {
            0 if at < data.len() => data[at] = rng.next() as u8,
            1 => data.insert(at, [0u8, 0xff, b'\n', b'\r', 9, 8][rng.below(6)]),
            2 if at + 8 <= data.len() => data[at..at + 8].copy_from_slice(&rng.next().to_le_bytes()),
            3 => data.truncate(at),
            _ => {
                let end = (at + rng.below(16)).min(data.len());
                data.drain(at..end);
            }
        }
    }
}

#[test]
fn gguf_parser_never_panics_on_mutated_seeds() {
    let seeds = seeds("gguf");
    let mut rng = Rng(0x6_6755);
    for round in 0..100_000 {
        let mut data = seeds[round % seeds.len()].clone();
        mutate(&mut rng, &mut data);
        let _ = parse(&data, 64);
    }
}

#[test]
fn sse_parser_never_panics_on_mutated_seeds() {
    let seeds = seeds("sse");
    let mut rng = Rng(0x55E);
    for round in 0..20_000 {
        let mut data = seeds[round % seeds.len()].clone();
        mutate(&mut rng, &mut data);
        let mut parser = SseParser::new(256);
        let split = rng.below(data.len() + 1);
        let mut n = 0usize;
        let _ = parser.feed(&data[..split], |ev| n += ev.data.len());
        let _ = parser.feed(&data[split..], |ev| n += ev.data.len());
        parser.finish();
    }
}
