//! Keeping vramscope alive on Ctrl-C while the command it runs handles the interrupt, so the
//! memory report still prints.

/// Ignores SIGINT and SIGQUIT in this process from now on. Call it only after the child has been
/// started (an ignored signal stays ignored across `exec`). Does nothing off Unix.
pub fn ignore_interrupts() {
    #[cfg(unix)]
    // SAFETY: setting a signal's disposition to SIG_IGN installs no handler code.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        libc::signal(libc::SIGQUIT, libc::SIG_IGN);
    }
}
