//! Runs `secmem io` without Python and prints the report: `cargo run --release -p secmem-sim
//! --example io_report -- PRESET [key=value ...]`.
fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let preset = args.first().cloned().unwrap_or_else(|| "dshield".into());
    let overrides: Vec<String> = args.iter().skip(1).cloned().collect();
    let report = secmem_sim::Config::load(Some(&preset), None, &overrides)
        .map_err(|e| e.to_string())
        .and_then(|cfg| secmem_sim::io::run_io(&cfg).map_err(|e| e.to_string()));
    match report {
        Ok(r) => println!("{}", serde_json::to_string_pretty(&r).unwrap()),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    }
}
