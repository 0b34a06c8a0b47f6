// The host path's conversion of one row of elements between float dtypes (core/base/float_convert.h),
// for the executor's copy loop (strided_copy.cc): a loop compiled for each pair of dtypes, and for
// sources of 16 bits or fewer into 16 bits or fewer a lookup table of every source value's
// result, built once from the CPU reference (FloatAsBits of BitsAsFloat), so the bits are the
// reference's.
//
// Plain functions; thread-safe (the tables are built once, on first use, under C++'s guarantee for
// function-local statics).
#pragma once

#include <cstdint>

#include "core/base/dtype.h"

namespace ferry {

// Converts `count` elements `from` -> `to` (both IsConvertibleFloat, different), element j read
// at src + j * src_step and written at dst + j * dst_step (steps in bytes; any alignment).
void ConvertFloatRow(DType from, DType to, int64_t count, const unsigned char* src,
                     int64_t src_step, unsigned char* dst, int64_t dst_step);

}  // namespace ferry
