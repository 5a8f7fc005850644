//! Placeholder until the load lands: the interface only.
use kairos_io::lane_testbed::LaneTestbed;
#[derive(Debug)]
pub struct Load;
impl Load {
    pub fn check(&mut self) -> anyhow::Result<()> {
        Ok(())
    }
}
pub fn start(_testbed: &LaneTestbed, _from: usize, _to: usize, _stress_core: usize) -> anyhow::Result<Load> {
    Err(anyhow::anyhow!("not yet"))
}
