//! The benchmark harness. Not built yet: the bench issue fills it.

fn main() {
    eprintln!("vellum-bench: no suites are built yet (see the bench issue)");
    std::process::exit(2);
}
