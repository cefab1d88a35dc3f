//! `cargo collage ...`: the `collage` CLI as a cargo subcommand.
fn main() {
    let mut args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("collage") {
        args.remove(1);
    }
    let exe = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join("collage")));
    let status = std::process::Command::new(exe.unwrap_or_else(|| "collage".into()))
        .args(&args[1..])
        .status();
    match status {
        Ok(s) => std::process::exit(s.code().unwrap_or(1)),
        Err(e) => {
            eprintln!("error: cannot run `collage`: {e}");
            std::process::exit(2);
        }
    }
}
