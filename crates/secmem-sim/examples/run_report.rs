//! Runs a config without Python and prints the report: `cargo run --release -p secmem-sim
//! --example run_report -- PRESET [key=value ...]`.
fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let preset = args.first().cloned().unwrap_or_else(|| "default".into());
    let overrides: Vec<String> = args.iter().skip(1).cloned().collect();
    let cfg = match secmem_sim::Config::load(Some(&preset), None, &overrides) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    };
    match secmem_sim::run(&cfg, &secmem_sim::TraceInput::Workload) {
        Ok(r) => println!("{}", serde_json::to_string_pretty(&r["stats"]).unwrap()),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    }
}
