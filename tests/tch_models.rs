//! The Rust API on real `tch` models: exact FLOP counts, scopes, training steps and peak memory.
//! Built with `--features tch` (see the Makefile's `test-rust`).

use torchscan::tch::nn::{self, Module, OptimizerConfig};
use torchscan::tch::{Device, Kind, Tensor};
use torchscan::{measure_flops, measure_peak_memory, Counter, Error};

const CPU: (Kind, Device) = (Kind::Float, Device::Cpu);

fn mlp(vs: &nn::VarStore) -> nn::Sequential {
    nn::seq().add(nn::linear(vs.root() / "fc1", 8, 16, Default::default())).add_fn(|x| x.relu()).add(nn::linear(
        vs.root() / "fc2",
        16,
        4,
        Default::default(),
    ))
}

#[test]
fn mlp_forward_is_counted_exactly() {
    let vs = nn::VarStore::new(Device::Cpu);
    let net = mlp(&vs);
    let x = Tensor::randn([5, 8], CPU);
    let report = tch::no_grad(|| measure_flops(|| drop(net.forward(&x)))).unwrap();
    // addmm 2*5*8*16 + 2*5*16*4 = 1280 + 640 and the biases' adds 5*16 + 5*4 = 100 (the bias
    // convention); relu 5*16 = 80.
    assert_eq!(report.by_operator["aten.addmm"], 2020);
    assert_eq!(report.by_operator["aten.relu"], 80);
    assert_eq!(report.total.value, Some(2100));
    assert!(report.diagnostics.is_empty(), "{:?}", report.diagnostics);
}

#[test]
fn conv_training_step_with_an_optimizer_is_complete() {
    let vs = nn::VarStore::new(Device::Cpu);
    let conv = nn::conv2d(vs.root() / "conv", 3, 8, 3, Default::default());
    let mut adam = nn::Adam::default().build(&vs, 1e-3).unwrap();
    let x = Tensor::randn([2, 3, 10, 10], CPU);
    let report = measure_flops(|| {
        let loss = conv.forward(&x).mean(Kind::Float);
        adam.backward_step(&loss);
    })
    .unwrap();
    // Forward: out [2,8,8,8], 2*1024*27 = 55296, and the bias added to its 1024 elements.
    // Backward: the weight gradient only (x needs no gradient), the same product again, and the
    // bias gradient, the sum of grad_output's 1024 elements.
    assert_eq!(report.by_operator["aten.convolution"], 55_296 + 1_024);
    assert_eq!(report.by_operator["aten.convolution_backward"], 55_296 + 1_024);
    assert!(report.by_phase.contains_key("backward"));
    assert_eq!(report.total.status, torchscan::report::Status::Complete, "{:?}", report.diagnostics);
    assert!(report.diagnostics.is_empty(), "{:?}", report.diagnostics);
}

#[test]
fn scopes_attribute_work_and_nest() {
    let a = Tensor::randn([4, 6], CPU);
    let b = Tensor::randn([6, 3], CPU);
    let counter = Counter::start().unwrap();
    {
        let _model = counter.scope("model").unwrap();
        {
            let _encoder = counter.scope("model.encoder").unwrap();
            drop(a.mm(&b)); // 2*4*6*3 = 144
        }
        drop(a.relu()); // 24
    }
    let report = counter.finish().unwrap();
    assert_eq!(report.by_module["model.encoder"], 144);
    assert_eq!(report.by_module["model"], 168);
    assert_eq!(report.total.value, Some(168));
}

#[test]
fn a_panicking_workload_leaves_no_session_behind() {
    let result = std::panic::catch_unwind(|| measure_flops(|| panic!("workload failed")));
    assert!(result.is_err());
    // The next measurement starts from nothing and counts only its own work.
    let a = Tensor::randn([2, 2], CPU);
    let report = measure_flops(|| drop(a.mm(&a))).unwrap();
    assert_eq!(report.total.value, Some(16));
}

#[test]
fn peak_memory_of_a_hand_computed_workload() {
    const MB: i64 = 1024 * 1024;
    let report = measure_peak_memory(|| {
        let four = Tensor::zeros([MB], CPU); // 4 MB of f32
        let two = Tensor::zeros([MB / 2], CPU); // 2 MB: 6 MB live
        drop(four);
        let one = Tensor::zeros([MB / 4], CPU); // 1 MB: 3 MB live
        drop((two, one));
    })
    .unwrap();
    assert_eq!(report.device, "cpu");
    assert_eq!(report.metric, "pytorch_tensor_bytes");
    assert_eq!(report.peak_bytes, 6 * 1024 * 1024);

    // A measurement inside a measurement holds the profiler slot: a clear error, not a crash.
    let nested = measure_peak_memory(|| {
        let inner = measure_peak_memory(|| {});
        assert!(matches!(&inner, Err(Error::Native(m)) if m.contains("profiler")), "{inner:?}");
    });
    assert!(nested.is_ok());
}
