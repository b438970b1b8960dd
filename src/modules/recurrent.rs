//! Recurrent layers (`nn.LSTM`, `nn.GRU`, `nn.RNN`), per time step and batch row `R` (the input's
//! rows: `T x B`, or the packed sequence's), per layer and direction, with input size `I` (the
//! previous layer's `H x directions` above the first) and hidden size `H`. Products count as a
//! Linear does (`out x (2 in - 1)`, plus the bias add), so with biases each gate row costs
//! `2 I + 2 H` for its two products and 1 to add them; the gate functions cost what the
//! activation modules say (sigmoid 4, tanh 6, relu 1), the state updates 1 per multiply or add:
//!
//! | layer | gate rows | gate arithmetic per row |
//! | --- | --- | --- |
//! | LSTM | `4H` | `28H`: 3 sigmoids, 2 tanh, 3 multiplies, 1 add |
//! | GRU | `3H` | `22H`: 2 sigmoids, 1 tanh, the reset product and its add, `(1 - z) n + z h` (4) |
//! | RNN | `H` | `6H` (tanh) or `1H` (relu) |
//!
//! Without biases each gate row costs 2 fewer. MACs: `gate rows x (I + H)` per row. DMAs: input,
//! output and parameters (the states' reads and writes are not counted). A projection
//! (`proj_size`) has no formula. The receptive field along a sequence is every earlier step: not
//! applicable.

use serde::Deserialize;

use super::{err, numel, product, sum, Count, Failure};

#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    Lstm,
    Gru,
    RnnTanh,
    RnnRelu,
}

#[derive(Clone, Debug, Deserialize)]
pub struct Recurrent {
    pub mode: Mode,
    pub input_size: u64,
    pub hidden_size: u64,
    pub num_layers: u64,
    pub bidirectional: bool,
    pub bias: bool,
    pub proj_size: u64,
    pub num_params: u64,
}

impl Recurrent {
    /// `(gate rows per H, gate arithmetic per H)`.
    fn gates(&self) -> (u64, u64) {
        match self.mode {
            Mode::Lstm => (4, 28),
            Mode::Gru => (3, 22),
            Mode::RnnTanh => (1, 6),
            Mode::RnnRelu => (1, 1),
        }
    }

    fn check(&self) -> Result<(), Failure> {
        if self.proj_size > 0 {
            return Err(Failure::Unsupported("LSTM with proj_size".into()));
        }
        if self.input_size == 0 || self.hidden_size == 0 {
            return Err(err("a recurrent layer needs nonzero input and hidden sizes"));
        }
        Ok(())
    }

    /// Time steps x batch rows of the call: the input's elements over its feature size.
    fn rows(&self, input: &[i64]) -> Result<u64, Failure> {
        let n = numel(input)?;
        if n % self.input_size != 0 {
            return Err(err("the input's last dimension is not the layer's input_size"));
        }
        Ok(n / self.input_size)
    }

    /// Input size of each layer-direction: `I` for the first layer, `H x directions` above.
    fn layer_inputs(&self) -> impl Iterator<Item = u64> + '_ {
        let directions = if self.bidirectional { 2 } else { 1 };
        (0..self.num_layers).flat_map(move |layer| {
            let input = if layer == 0 { self.input_size } else { self.hidden_size * directions };
            std::iter::repeat_n(input, directions as usize)
        })
    }

    pub fn flops(&self, input: &[i64]) -> Count {
        self.check()?;
        let (rows, h) = (self.rows(input)?, self.hidden_size);
        let (gates, arithmetic) = self.gates();
        let mut per_row = 0u64;
        for layer_input in self.layer_inputs() {
            let gate_rows = product(&[gates, h])?;
            let products = product(&[gate_rows, sum(&[product(&[2, layer_input])?, product(&[2, h])?])?])?;
            let biasless = if self.bias { 0 } else { product(&[2, gate_rows])? };
            let layer = sum(&[products, gate_rows, product(&[arithmetic, h])?])?
                .checked_sub(biasless)
                .ok_or_else(|| err("negative count"))?;
            per_row = sum(&[per_row, layer])?;
        }
        product(&[rows, per_row])
    }

    pub fn macs(&self, input: &[i64]) -> Count {
        self.check()?;
        let (rows, h) = (self.rows(input)?, self.hidden_size);
        let gate_rows = product(&[self.gates().0, h])?;
        let mut per_row = 0u64;
        for layer_input in self.layer_inputs() {
            per_row = sum(&[per_row, product(&[gate_rows, sum(&[layer_input, h])?])?])?;
        }
        product(&[rows, per_row])
    }

    pub fn dmas(&self, n_in: u64, n_out: u64) -> Count {
        self.check()?;
        sum(&[n_in, n_out, self.num_params])
    }
}

#[cfg(test)]
mod tests {
    use crate::modules::testing::call;
    use crate::modules::Failure;
    use serde_json::json;

    fn layer(mode: &str, layers: u64, bidirectional: bool, bias: bool) -> crate::modules::Call {
        call(json!({"family": "recurrent", "mode": mode, "input_size": 8, "hidden_size": 16, "num_layers": layers,
                    "bidirectional": bidirectional, "bias": bias, "proj_size": 0, "num_params": 100,
                    "input": [5, 3, 8], "output": [5, 3, 16]}))
    }

    #[test]
    fn one_layer_per_family() {
        // 15 rows. LSTM: 64 x (16 + 32) + 64 + 28 x 16 = 3584 per row = 53,760.
        assert_eq!(layer("lstm", 1, false, true).flops(), Ok(53_760));
        // Without biases: 2 x 64 fewer per row: 3456 x 15 = 51,840.
        assert_eq!(layer("lstm", 1, false, false).flops(), Ok(51_840));
        // GRU: 48 x 48 + 48 + 22 x 16 = 2704 per row = 40,560.
        assert_eq!(layer("gru", 1, false, true).flops(), Ok(40_560));
        // RNN (tanh): 16 x 48 + 16 + 96 = 880 per row = 13,200; relu: 800 per row = 12,000.
        assert_eq!(layer("rnn_tanh", 1, false, true).flops(), Ok(13_200));
        assert_eq!(layer("rnn_relu", 1, false, true).flops(), Ok(12_000));
        // MACs: LSTM 64 x 24 = 1536 per row = 23,040.
        assert_eq!(layer("lstm", 1, false, true).macs(), Ok(23_040));
        assert_eq!(layer("lstm", 1, false, true).dmas(), Ok(120 + 240 + 100));
        assert!(matches!(layer("lstm", 1, false, true).receptive_field(), Err(Failure::NotApplicable(_))));
    }

    #[test]
    fn stacked_and_bidirectional_layers() {
        // Two bidirectional LSTM layers: layer 1 reads 8 (3584 per row and direction), layer 2
        // reads 32: 64 x (64 + 32) + 64 + 448 = 6656; per row 2 x 3584 + 2 x 6656 = 20,480.
        assert_eq!(layer("lstm", 2, true, true).flops(), Ok(15 * 20_480));
        let projected = call(json!({"family": "recurrent", "mode": "lstm", "input_size": 8, "hidden_size": 16,
            "num_layers": 1, "bidirectional": false, "bias": true, "proj_size": 4, "num_params": 100,
            "input": [5, 3, 8], "output": [5, 3, 4]}));
        assert!(matches!(projected.flops(), Err(Failure::Unsupported(_))));
    }
}
