//! Process-wide memory settings: the `capw` binary and the benchmarks that stand in for it apply
//! them first thing in `main`, before anything allocates much.

/// Turns transparent huge pages off for this process.
///
/// mimalloc, the binary's allocator, advises huge pages on its arenas. The host's heap is many
/// small objects that live for very different times, so a 2 MiB page stays resident while any of
/// its objects lives, and a purge of freed memory returns nothing until the whole page is free.
/// With huge pages the host at 1000 clusters held about 40 MiB more (docs/benchmarks.md).
/// This is what mimalloc's own `MIMALLOC_ALLOW_THP=0` does at start-up, done here so no user
/// has to know the variable. A kernel without the setting (before 3.15) keeps its default,
/// which only costs memory.
pub fn no_transparent_huge_pages() {
    // SAFETY: PR_SET_THP_DISABLE takes integer arguments only and changes a flag of this
    // process's memory map; no memory of ours is read or written.
    let _ = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
}

#[cfg(test)]
mod tests {
    #[test]
    fn huge_pages_are_off_for_the_process() {
        super::no_transparent_huge_pages();
        // SAFETY: PR_GET_THP_DISABLE reads this process's flag; no memory of ours is touched.
        let flag = unsafe { libc::prctl(libc::PR_GET_THP_DISABLE, 0, 0, 0, 0) };
        assert_eq!(flag, 1, "PR_GET_THP_DISABLE after the setting");
    }
}
