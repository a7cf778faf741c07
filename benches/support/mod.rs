//! Shared by the benchmarks (each `benches/*.rs` is its own crate and includes this module).

use std::time::{Duration, Instant};

/// Median time per iteration over 5 rounds of ~200 ms each, after a short warm-up.
pub fn measure(mut f: impl FnMut()) -> Duration {
    for _ in 0..3 {
        f();
    }
    let probe = Instant::now();
    f();
    let once = probe.elapsed().max(Duration::from_nanos(50));
    let iters = ((Duration::from_millis(200).as_nanos() / once.as_nanos()) as u32).clamp(1, 1_000_000);
    let mut rounds: Vec<Duration> = (0..5)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..iters {
                f();
            }
            start.elapsed() / iters
        })
        .collect();
    rounds.sort();
    rounds[2]
}
