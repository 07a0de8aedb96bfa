//! A pooled launch performs no heap allocation on the hot path: a counting
//! global allocator sees none across many launches of every grain (helper
//! threads included: the counter is process-wide). Alone in its own binary,
//! without the libtest harness (`harness = false` in Cargo.toml), whose own
//! threads would allocate while the window is open.

mod common;
#[path = "common/counting_alloc.rs"]
mod counting_alloc;

use counting_alloc::{Counting, allocations};
use taskgrain::pool::{Grain, Pool, PoolConfig};
use taskgrain::simt::Tiling;

#[global_allocator]
static GLOBAL: Counting = Counting;

fn kernel(g: usize, span: &mut [f32]) {
    span.fill(g as f32);
}

fn main() {
    launches_do_not_allocate();
    println!("pool_alloc: launches_do_not_allocate ... ok");
}

fn launches_do_not_allocate() {
    let _w = common::watchdog(120, "allocation count");
    let tiling = Tiling::rows(200, 16, 2).unwrap();
    let grains = [
        Grain::Legacy,
        Grain::tasks(1).unwrap(),
        Grain::tasks(3).unwrap(),
        Grain::Caller,
    ];
    for (workers, over) in [(1, false), (2, false), (8, true)] {
        let pool = Pool::new(PoolConfig {
            workers,
            oversubscribe: over,
            ..PoolConfig::default()
        })
        .unwrap();
        let mut out = vec![0.0f32; tiling.len()];
        let f = |t: usize| {
            std::hint::black_box(t);
        };
        // Warm up: thread start-up, thread-locals, first futex waits.
        for _ in 0..100 {
            for grain in grains {
                pool.launch(&tiling, grain, &mut out, &kernel).unwrap();
            }
            pool.run_tasks(64, &f).unwrap();
        }
        let before = allocations();
        let mut helped = 0;
        for i in 0..2000 {
            for grain in grains {
                helped += usize::from(
                    pool.launch(&tiling, grain, &mut out, &kernel)
                        .unwrap()
                        .helped,
                );
            }
            helped += usize::from(pool.run_tasks(1 + i % 64, &f).unwrap().helped);
            if i % 100 == 0 {
                // Let helpers park, so that waking them is exercised too.
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
        let after = allocations();
        assert_eq!(
            after - before,
            0,
            "workers {workers}: {} allocations in 10000 launches",
            after - before
        );
        std::hint::black_box(helped);
    }
}
