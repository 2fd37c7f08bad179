//! The threads the host kernels ([`crate::cpu_qmm`]) split their work over.
//!
//! They run on rayon's global pool. A thread outside the pool that starts a product hands it
//! to the pool's threads, sleeps until they finish and is woken again: a decode step makes a
//! few products per block, so on two cores those hand-offs cost about a tenth of a step. A
//! thread inside the pool works on its own product, and only the other threads are woken.

/// Makes the calling thread one of the threads of rayon's global pool (which keeps one
/// thread per core), so the host products it starts run partly on it. Call it from the thread
/// that runs the model, before anything else uses rayon; `false` when the pool already
/// exists (then nothing changes).
pub fn adopt_current_thread() -> bool {
    rayon::ThreadPoolBuilder::new()
        .use_current_thread()
        .build_global()
        .is_ok()
}
