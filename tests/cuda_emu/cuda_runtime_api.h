#pragma once
// The CUDA emulator: see cuda_runtime.h beside this file.
#include "cuda_runtime.h"
