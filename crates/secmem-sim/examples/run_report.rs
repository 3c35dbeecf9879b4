//! Runs a config without Python and prints the report: `cargo run --release -p secmem-sim
//! --example run_report -- PRESET [key=value ...] [trace=PATH]` (the built-in workload without
//! `trace=`).
fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let preset = args.first().cloned().unwrap_or_else(|| "default".into());
    let trace = args.iter().skip(1).find_map(|a| a.strip_prefix("trace=")).map(std::path::PathBuf::from);
    let overrides: Vec<String> = args.iter().skip(1).filter(|a| !a.starts_with("trace=")).cloned().collect();
    let cfg = match secmem_sim::Config::load(Some(&preset), None, &overrides) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    };
    let input = trace.map_or(secmem_sim::TraceInput::Workload, secmem_sim::TraceInput::File);
    let cfg = match secmem_sim::run::resolve_for_input(&cfg, &input) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    };
    match secmem_sim::run(&cfg, &input) {
        Ok(r) => println!("{}", serde_json::to_string_pretty(&r["stats"]).unwrap()),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    }
}
