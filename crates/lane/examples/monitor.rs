//! A monitor on the express lane: listens to the tunnels of a name that reach its host and
//! prints each message with its one-way latency (the sender's stamp to the kernel's receive
//! stamp, one wall clock), and a summary every second.
//!
//! ```text
//! cargo run --release -p kairos-lane --example monitor -- NODE_DIR [NAME] [SECONDS]
//! ```

use std::path::PathBuf;
use std::time::{Duration, Instant};

use kairos_lane::node::app::LaneApp;

fn main() {
    if let Err(e) = run() {
        eprintln!("monitor: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(dir) = args.first() else {
        return Err("usage: monitor NODE_DIR [NAME] [SECONDS]".into());
    };
    let name = args.get(1).map_or("sensor", String::as_str);
    let seconds: f64 = args.get(2).map_or(Ok(f64::INFINITY), |s| s.parse())?;
    let mut app = LaneApp::connect(&PathBuf::from(dir), "monitor", Duration::from_secs(5))?;
    app.listen(name)?;
    println!("listening to '{name}' on {}", app.host());
    let (start, mut second) = (Instant::now(), Instant::now());
    let mut latencies_us: Vec<f64> = Vec::new();
    let mut buf = [0u8; 2048];
    while start.elapsed().as_secs_f64() < seconds {
        match app.recv(&mut buf)? {
            Some(d) => {
                let us = d.received_ns.saturating_sub(d.sent_ns) as f64 / 1e3;
                latencies_us.push(us);
                println!("{} (tunnel {}, {us:.1} us)", String::from_utf8_lossy(&buf[..d.len]), d.tunnel_id);
            }
            None => std::thread::sleep(Duration::from_micros(100)),
        }
        if second.elapsed() >= Duration::from_secs(1) && !latencies_us.is_empty() {
            latencies_us.sort_by(f64::total_cmp);
            let n = latencies_us.len();
            println!(
                "-- {n} messages: one-way latency min {:.1} us, median {:.1} us, max {:.1} us; {} refused by a full inbox",
                latencies_us[0],
                latencies_us[n / 2],
                latencies_us[n - 1],
                app.inbox_refused()
            );
            latencies_us.clear();
            second = Instant::now();
        }
    }
    Ok(())
}
