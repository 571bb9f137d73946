// Every block format header in one include, for code that handles all of them (the codec table,
// tests, device decode checks). C++17, host and device.
#pragma once

#include "runtime/quant/float_rows.h"
#include "runtime/quant/iq4_nl.h"
#include "runtime/quant/iq4_xs.h"
#include "runtime/quant/mxfp4.h"
#include "runtime/quant/q2_k.h"
#include "runtime/quant/q3_k.h"
#include "runtime/quant/q4_0.h"
#include "runtime/quant/q4_1.h"
#include "runtime/quant/q4_k.h"
#include "runtime/quant/q5_0.h"
#include "runtime/quant/q5_1.h"
#include "runtime/quant/q5_k.h"
#include "runtime/quant/q6_k.h"
#include "runtime/quant/q8_0.h"
#include "runtime/quant/q8_k.h"
