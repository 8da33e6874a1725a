//! Tests only: keeps the simulations' deliberate handler panics out of the test output.

/// The marker every simulated handler panic's message contains.
pub(crate) const SIMULATED_PANIC: &str = "simulated handler panic";

/// Installs, once, a panic hook that stays silent for messages containing [`SIMULATED_PANIC`]
/// and reports every other panic as usual.
pub(crate) fn quiet() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let simulated = info
                .payload()
                .downcast_ref::<String>()
                .is_some_and(|m| m.contains(SIMULATED_PANIC));
            if !simulated {
                default(info);
            }
        }));
    });
}
