// Part `runner` of issue 20: the batched low-rank product the runner adds after each base
// MatMul (placeholder until it lands).
#pragma once
