// IEEE half and bfloat16 conversions. The 16-bit floats are stored as raw bits and reduced in
// float32, as Gloo and NCCL do on CPUs without native half arithmetic.
#pragma once
#include <cstdint>
#include <cstring>

namespace distrun {

inline float bits_to_float(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
inline uint32_t float_to_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

/// bfloat16 bits to float: the top half of a float32.
inline float bf16_to_float(uint16_t h) { return bits_to_float(uint32_t(h) << 16); }

/// float to bfloat16 bits, rounding to nearest even (NaN stays NaN).
inline uint16_t float_to_bf16(float f) {
  uint32_t b = float_to_bits(f);
  if ((b & 0x7fffffffu) > 0x7f800000u) return uint16_t((b >> 16) | 0x40);
  b += 0x7fffu + ((b >> 16) & 1u);
  return uint16_t(b >> 16);
}

/// IEEE binary16 bits to float.
inline float half_to_float(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  if (exp == 0x1f) return bits_to_float(sign | 0x7f800000u | (man << 13));
  if (exp == 0) {
    if (man == 0) return bits_to_float(sign);
    // Subnormal: value = man * 2^-24.
    float v = float(man) * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  return bits_to_float(sign | ((exp + 112) << 23) | (man << 13));
}

/// float to IEEE binary16 bits, rounding to nearest even, with overflow to infinity.
inline uint16_t float_to_half(float f) {
  uint32_t b = float_to_bits(f);
  uint16_t sign = uint16_t((b >> 16) & 0x8000u);
  uint32_t abs = b & 0x7fffffffu;
  if (abs > 0x7f800000u) return uint16_t(sign | 0x7e00u);   // NaN
  if (abs >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // overflow -> inf
  if (abs < 0x38800000u) {                                  // subnormal or zero
    float v = bits_to_float(abs) * 16777216.0f;             // scale to units of 2^-24
    uint32_t r = uint32_t(v);
    float frac = v - float(r);
    if (frac > 0.5f || (frac == 0.5f && (r & 1u))) ++r;
    return uint16_t(sign | r);
  }
  uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);
  return uint16_t(sign | ((rounded - (112u << 23)) >> 13));
}

}  // namespace distrun
