//! A `tch` training step measured with torchscan: FLOPs per layer and phase, and peak memory.
//!
//!     LIBTORCH_USE_PYTORCH=1 cargo run --features tch --example tch_mlp
//!
//! (with the Python that has torch 2.13.0 first on PATH; see docs/rust.md).

use torchscan::tch::nn::{self, Module, OptimizerConfig};
use torchscan::tch::{Device, Kind, Tensor};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let vs = nn::VarStore::new(Device::Cpu);
    let fc1 = nn::linear(vs.root() / "fc1", 32, 64, Default::default());
    let fc2 = nn::linear(vs.root() / "fc2", 64, 10, Default::default());
    let mut optimizer = nn::AdamW::default().build(&vs, 1e-3)?;
    let x = Tensor::randn([16, 32], (Kind::Float, Device::Cpu));
    let labels = Tensor::zeros([16], (Kind::Int64, Device::Cpu));

    let counter = torchscan::Counter::start()?;
    let logits = {
        let _model = counter.scope("mlp")?;
        let hidden = {
            let _layer = counter.scope("mlp.fc1")?;
            fc1.forward(&x).relu()
        };
        let _layer = counter.scope("mlp.fc2")?;
        fc2.forward(&hidden)
    };
    optimizer.backward_step(&logits.cross_entropy_for_logits(&labels));
    let report = counter.finish()?;
    println!("{}", serde_json::to_string_pretty(&report)?);

    let memory = torchscan::measure_peak_memory(|| {
        let loss = fc2.forward(&fc1.forward(&x).relu()).cross_entropy_for_logits(&labels);
        optimizer.backward_step(&loss);
    })?;
    println!("peak CPU memory of a step: {} bytes", memory.peak_bytes);
    Ok(())
}
