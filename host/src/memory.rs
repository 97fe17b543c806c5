//! Giving freed memory back to the system. glibc's malloc keeps the pages
//! of freed chunks that are not at the top of a heap, and a long-running
//! process whose caches grew and shrank (claims created, then deleted)
//! keeps its peak resident set for good; `malloc_trim` hands whole free
//! pages back. Elsewhere (musl, other allocators) there is nothing to do.

/// Returns the allocator's whole free pages to the system; true when some
/// memory was released.
pub fn give_back() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: malloc_trim only walks the allocator's own free lists;
        // it takes no pointer and is safe to call from any thread.
        unsafe { libc::malloc_trim(0) == 1 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

/// Keeps every thread's allocations in one heap (glibc's `M_ARENA_MAX`
/// of 1), unless the operator set `MALLOC_ARENA_MAX`. A server whose
/// calls run on whichever worker thread is free otherwise spreads its
/// long-lived records over one heap per thread, each fragmented on its
/// own: `volplane serve` held 100,000 volumes in two heaps of 28 MiB where
/// one of 43 MiB does. Its threads mostly wait on the disk and the
/// socket, so one heap costs them no measurable throughput. Call it
/// before the threads start; true when it took effect.
pub fn one_heap() -> bool {
    if std::env::var_os("MALLOC_ARENA_MAX").is_some() {
        return false;
    }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallopt sets an allocator parameter; it takes no pointer.
        unsafe { libc::mallopt(libc::M_ARENA_MAX, 1) == 1 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

/// Starts a thread (`give-back`) that hands the freed pages back every
/// `period`, for the life of the process: a long-running server whose
/// tables and caches grow and shrink (a driver's journal, a controller's
/// informers) keeps its resident set near what it holds, on any runtime.
/// Fails only when no thread can be started.
pub fn give_back_every(period: std::time::Duration) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("give-back".into())
        .spawn(move || {
            loop {
                std::thread::sleep(period);
                give_back();
            }
        })
        .map(drop)
}

#[cfg(test)]
mod tests {
    /// Resident memory of this process, in KiB.
    fn rss_kib() -> u64 {
        std::fs::read_to_string("/proc/self/status")
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap()
    }

    #[test]
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn memory_freed_in_the_middle_of_the_heap_goes_back() {
        // Many small blocks, all but one in 64 freed: the survivors pin
        // every page to the heap, so free() alone gives none back.
        let mut blocks: Vec<Option<Vec<u8>>> = (0..200_000).map(|_| Some(vec![1u8; 400])).collect();
        let before = rss_kib();
        for (i, b) in blocks.iter_mut().enumerate() {
            if i % 64 != 0 {
                *b = None;
            }
        }
        let freed = rss_kib();
        super::give_back();
        let trimmed = rss_kib();
        assert!(
            trimmed + 20_000 < freed,
            "RSS {before} KiB full, {freed} KiB once freed, {trimmed} KiB after give_back"
        );
        drop(blocks);
    }

    /// In a process of its own (this test binary again, running only this
    /// test): `one_heap` takes effect unless `MALLOC_ARENA_MAX` is set,
    /// and `give_back_every` runs as a thread named `give-back`.
    #[test]
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn one_heap_yields_to_the_operator_and_the_give_back_thread_runs() {
        const CHILD: &str = "VOLPLANE_MEMORY_TEST_CHILD";
        const NAME: &str =
            "memory::tests::one_heap_yields_to_the_operator_and_the_give_back_thread_runs";
        if let Some(expect) = std::env::var_os(CHILD) {
            let took = super::one_heap();
            assert_eq!(took, expect == "takes", "one_heap answered {took}");
            super::give_back_every(std::time::Duration::from_millis(10)).unwrap();
            let named = |_: ()| {
                std::fs::read_dir("/proc/self/task").unwrap().any(|t| {
                    let comm = t.unwrap().path().join("comm");
                    std::fs::read_to_string(comm).is_ok_and(|c| c.trim() == "give-back")
                })
            };
            // The thread names itself as it starts.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
            while !named(()) && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            assert!(named(()), "no give-back thread among this process's");
            return;
        }
        for (arena_max, expect) in [(None, "takes"), (Some("2"), "declines")] {
            let mut child = std::process::Command::new(std::env::current_exe().unwrap());
            child
                .args(["--exact", NAME, "--test-threads=1"])
                .env(CHILD, expect);
            child.env_remove("MALLOC_ARENA_MAX");
            if let Some(n) = arena_max {
                child.env("MALLOC_ARENA_MAX", n);
            }
            let out = child.output().unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success() && text.contains("1 passed"),
                "MALLOC_ARENA_MAX={arena_max:?}: {text}{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}
