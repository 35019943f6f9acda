// Stage 1 of the Bernoulli marginal-slope model on the device, in parts, one
// per section of the math (the overview and the shared helpers open
// basis.cuh). The parts do not include each other: the runtime embeds them
// in this order (src/bms/device/rows.rs, BMS_KERNELS), and the C++ replay
// (tests/replay/driver.cpp) includes this file.
#include "bms_stage1/basis.cuh"
#include "bms_stage1/edges.cuh"
#include "bms_stage1/pieces.cuh"
#include "bms_stage1/quadrature.cuh"
#include "bms_stage1/moments.cuh"
#include "bms_stage1/calibration.cuh"
#include "bms_stage1/cells.cuh"
#include "bms_stage1/observed.cuh"
