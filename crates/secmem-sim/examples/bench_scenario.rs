//! Runs one bench scenario without Python: `cargo run --release -p secmem-sim --example
//! bench_scenario -- secure-lazy-random [scale]`.
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let name = args.get(1).map(String::as_str).unwrap_or("secure-lazy-random");
    let scale: f64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(1.0);
    match secmem_sim::bench::run_scenario(name, scale) {
        Ok(r) => println!("{}", serde_json::to_string(&r).unwrap()),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    }
}
