pub mod load;
pub mod peers;
pub mod sockperf;
