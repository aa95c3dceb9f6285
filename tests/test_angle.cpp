// Tests for detail/math/angle.hpp (reduction of (w_hi + w_lo) t mod 2π) and detail/math/sincos.hpp
// (sin/cos of reduced angles, batched phases). Two independent references:
//  - kTable: phases whose exact value was computed with mpmath at 2000 bits. Each frequency
//    is w = RN64(ω) (ω exact: 1, 1e-6, 0.1, 2/3, 1/3, θ^(-2i/d) of RoPE with θ = 1e4, d = 128),
//    stored as (hi, lo) = split(w), so hi + lo == w exactly; r = w t - 2π·nint(w t / 2π) is
//    given rounded to double and to long double (64 bits), sin and cos rounded to double.
//  - QuadRef (x86-64 g++/clang++ with __float128, libgcc soft-float only, no libquadmath):
//    w_hi t and w_lo t are exact in binary128 (106 ≤ 113 bits), reduced by 2π in 17 pieces
//    of 15 bits (each k·piece is exact for |k| < 2^98), then sin/cos by Taylor series. Its
//    error is ~1e-33, far below anything tested. Used for random sweeps.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>
#include <peal/detail/math/angle.hpp>
#include <peal/detail/math/sincos.hpp>
#include <random>
#include <utility>
#include <vector>

#include "angle_nofma.hpp"
#include "tolerances.hpp"

namespace {

namespace pd = peal::detail;

// ---- Tolerances (absolute; angles in radians): peal_test::AngleTol of tolerances.hpp, where
// each is derived from the bounds of angle.hpp and sincos.hpp.
using peal_test::AngleTol;
constexpr double kTolAngle = AngleTol::reduced;
double tol_angle(double abs_phase) { return AngleTol::reduced_at(abs_phase); }
constexpr double kTolSinCos = AngleTol::sincos;
double tol_phase_sincos(double abs_phase) { return AngleTol::phase_sincos(abs_phase); }
constexpr double kTableRounding = AngleTol::table_rounding;
constexpr double kTolFloat = AngleTol::to_float;
constexpr long double kEpsLd = std::numeric_limits<long double>::epsilon();
constexpr long double kTolAngleLd = AngleTol::reduced_long;

struct TableCase {
  double w_hi, w_lo, t;  // frequency (split of a 64-bit w) and position
  double r, s, c;        // exact reduced phase, sin, cos, each rounded to double
  long double r_ld;      // exact reduced phase rounded to long double (64 bits)
  const char* note;
};

// clang-format off
const TableCase kTable[] = {
    {0x1.0000000000000p+0, 0x0.0p+0, 0x0.0p+0, 0x0.0p+0, 0x0.0p+0, 0x1.0000000000000p+0, 0.0L, "w = 1"},
    {0x1.0000000000000p+0, 0x0.0p+0, 0x1.56e1fc2f8f359p-997, 0x1.56e1fc2f8f359p-997, 0x1.56e1fc2f8f359p-997, 0x1.0000000000000p+0, 0xab70fe17c79ac800p-1060L, "w = 1"},
    {0x1.0000000000000p+0, 0x0.0p+0, 0x0.0000000000001p-1022, 0x0.0000000000001p-1022, 0x0.0000000000001p-1022, 0x1.0000000000000p+0, 0x8000000000000000p-1137L, "w = 1"},
    {0x1.0000000000000p+0, 0x0.0p+0, 0x1.0000000000000p+0, 0x1.0000000000000p+0, 0x1.aed548f090ceep-1, 0x1.14a280fb5068cp-1, 0x8000000000000000p-63L, "w = 1"},
    {0x1.0000000000000p+0, 0x0.0p+0, 0x1.ffe0000000000p+11, -0x1.a306a768b674fp+0, -0x1.fee26bf3a602ep-1, -0x1.0e3cd8b89b3a3p-4, -0xd18353b45b3a7995p-63L, "w = 1"},
    {0x1.0000000000000p+0, 0x0.0p+0, 0x1.e848000000000p+19, -0x1.6e254d0f6b398p-2, -0x1.6664b2568d867p-2, 0x1.df9df9906d32cp-1, -0xb712a687b59cc3adp-65L, "w = 1"},
    {0x1.0000000000000p+0, 0x0.0p+0, 0x1.0000000000000p+24, -0x1.c9b6498c1137fp-1, -0x1.8f22f8433d6eep-1, 0x1.40ad67f3f0c9ap-1, -0xe4db24c6089bf84ap-64L, "w = 1"},
    {0x1.0000000000000p+0, 0x0.0p+0, 0x1.0000000000000p+40, -0x1.5ca6dfeaae1f6p+1, -0x1.9f7122716d5d9p-2, -0x1.d3f8577b3aa88p-1, -0xae536ff5570fb058p-62L, "w = 1"},
    {0x1.0000000000000p+0, 0x0.0p+0, 0x1.0000000000000p+52, 0x1.09f4683d25023p+1, 0x1.bf996908bb506p-1, -0x1.f1300d681503fp-2, 0x84fa341e928118ffp-62L, "w = 1"},
    {0x1.0000000000000p+0, 0x0.0p+0, -0x1.0000000000000p+40, 0x1.5ca6dfeaae1f6p+1, 0x1.9f7122716d5d9p-2, -0x1.d3f8577b3aa88p-1, 0xae536ff5570fb058p-62L, "w = 1"},
    {0x1.0000000000000p+0, 0x0.0p+0, -0x1.81ce000000000p+13, 0x1.6b12e7a711aafp-1, 0x1.4d6681d994672p-1, 0x1.84926b58f0e50p-1, 0xb58973d388d57853p-64L, "w = 1"},
    {0x1.bb5fad00ab22cp-1, 0x1.a000000000000p-58, 0x1.0000000000000p+0, 0x1.bb5fad00ab22cp-1, 0x1.860037a6299f2p-1, 0x1.4bba51888b7c8p-1, 0xddafd68055916068p-64L, "RoPE theta=1e4, d=128, i=1"},
    {0x1.bb5fad00ab22cp-1, 0x1.a000000000000p-58, 0x1.ffe0000000000p+11, 0x1.342562a5f50b2p+1, 0x1.57098df9cce84p-1, -0x1.7c175f589b580p-1, 0x9a12b152fa858f63p-62L, "RoPE theta=1e4, d=128, i=1"},
    {0x1.bb5fad00ab22cp-1, 0x1.a000000000000p-58, 0x1.ffff000000000p+16, -0x1.7764418d10226p+1, -0x1.a89d000fd562cp-3, -0x1.f4dfecd361588p-1, -0xbbb220c68811337dp-62L, "RoPE theta=1e4, d=128, i=1"},
    {0x1.bb5fad00ab22cp-1, 0x1.a000000000000p-58, 0x1.e848000000000p+19, -0x1.900794ad75666p+1, -0x1.0c0d3b9dd4a34p-6, -0x1.ffee74f7b7400p-1, -0xc803ca56bab333bcp-62L, "RoPE theta=1e4, d=128, i=1"},
    {0x1.bb5fad00ab22cp-1, 0x1.a000000000000p-58, 0x1.0000000000000p+24, -0x1.4f0eb033006fcp-1, -0x1.37a644821574bp-1, 0x1.96398d6fd608bp-1, -0xa78758198037e18bp-64L, "RoPE theta=1e4, d=128, i=1"},
    {0x1.bb5fad00ab22cp-1, 0x1.a000000000000p-58, 0x1.0000000000000p+40, 0x1.adc3b83eb8c7ap+0, 0x1.fd04bc3aa2c85p-1, -0x1.b96456b8172f4p-4, 0xd6e1dc1f5c63ce5fp-63L, "RoPE theta=1e4, d=128, i=1"},
    {0x1.bb5fad00ab22cp-1, 0x1.a000000000000p-58, 0x1.0000000000001p+52, -0x1.7ea6cced34ac1p+1, -0x1.365b3d2783c4ep-3, -0x1.fa163ddb65160p-1, -0xbf5366769a560bc0p-62L, "RoPE theta=1e4, d=128, i=1"},
    {0x1.bb5fad00ab22cp-1, 0x1.a000000000000p-58, -0x1.0000000000060p+47, 0x1.3735bf3b9308fp+1, 0x1.4dd77c9248036p-1, -0x1.84315eaf5dbfbp-1, 0x9b9adf9dc9847a43p-62L, "RoPE theta=1e4, d=128, i=1"},
    {0x1.62b2f0cd55b56p-4, 0x1.c380000000000p-58, 0x1.0000000000000p+0, 0x1.62b2f0cd55b56p-4, 0x1.62417ed9dcc7ap-4, 0x1.fe14db3ae77aep-1, 0xb1597866aadab387p-67L, "RoPE theta=1e4, d=128, i=17"},
    {0x1.62b2f0cd55b56p-4, 0x1.c380000000000p-58, 0x1.ffe0000000000p+11, 0x1.60838147345bfp+1, 0x1.8304eed8a2113p-2, -0x1.da05f24f5765ep-1, 0xb041c0a39a2df6cep-62L, "RoPE theta=1e4, d=128, i=17"},
    {0x1.62b2f0cd55b56p-4, 0x1.c380000000000p-58, 0x1.ffff000000000p+16, 0x1.6c95aeb6279afp+1, 0x1.2806db3109870p-2, -0x1.ea2387ea6fbc1p-1, 0xb64ad75b13cd79dbp-62L, "RoPE theta=1e4, d=128, i=17"},
    {0x1.62b2f0cd55b56p-4, 0x1.c380000000000p-58, 0x1.e848000000000p+19, 0x1.928aeefc0581bp+0, 0x1.ffffd316b4080p-1, -0x1.ace6d28053f89p-10, 0xc945777e02c0d796p-63L, "RoPE theta=1e4, d=128, i=17"},
    {0x1.62b2f0cd55b56p-4, 0x1.c380000000000p-58, 0x1.0000000000000p+24, -0x1.5273b36c5bcd3p+0, -0x1.f03ebeb39e278p-1, 0x1.f823c46e1d9e1p-3, -0xa939d9b62de699d8p-63L, "RoPE theta=1e4, d=128, i=17"},
    {0x1.62b2f0cd55b56p-4, 0x1.c380000000000p-58, 0x1.0000000000000p+40, 0x1.6cacf05014bb9p+0, 0x1.fa881f58e1443p-1, 0x1.2a84ec52beb9ep-3, 0xb65678280a5dc99ap-63L, "RoPE theta=1e4, d=128, i=17"},
    {0x1.62b2f0cd55b56p-4, 0x1.c380000000000p-58, 0x1.0000000000001p+52, -0x1.17898140ad5bcp+1, -0x1.a2c090370a462p-1, -0x1.269a392945c25p-1, -0x8bc4c0a056addc19p-62L, "RoPE theta=1e4, d=128, i=17"},
    {0x1.62b2f0cd55b56p-4, 0x1.c380000000000p-58, -0x1.0000000000060p+47, -0x1.8a6e490a5bae7p-2, -0x1.80bfd7a7324dep-2, 0x1.da7c26604702cp-1, -0xc53724852dd73b52p-65L, "RoPE theta=1e4, d=128, i=17"},
    {0x1.e459c57e28a47p-14, -0x1.0c80000000000p-68, 0x1.0000000000000p+0, 0x1.e459c57e28a47p-14, 0x1.e459c56c192adp-14, 0x1.ffffffc6b9c6ep-1, 0xf22ce2bf145235e7p-77L, "RoPE theta=1e4, d=128, i=63"},
    {0x1.e459c57e28a47p-14, -0x1.0c80000000000p-68, 0x1.ffe0000000000p+11, 0x1.e43b7fe1d0c1ep-2, 0x1.d262caf05b579p-2, 0x1.c7d000c69ab2ep-1, 0xf21dbff0e860f0c4p-65L, "RoPE theta=1e4, d=128, i=63"},
    {0x1.e459c57e28a47p-14, -0x1.0c80000000000p-68, 0x1.ffff000000000p+16, 0x1.48e478340c4f5p+1, 0x1.15347808fbf57p-1, -0x1.ae776ce163b5cp-1, 0xa4723c1a0627a625p-62L, "RoPE theta=1e4, d=128, i=63"},
    {0x1.e459c57e28a47p-14, -0x1.0c80000000000p-68, 0x1.e848000000000p+19, 0x1.30c01de729d72p+1, 0x1.60ff9d55a33b0p-1, -0x1.72dbc9d349109p-1, 0x98600ef394eb8e8cp-62L, "RoPE theta=1e4, d=128, i=63"},
    {0x1.e459c57e28a47p-14, -0x1.0c80000000000p-68, 0x1.0000000000000p+24, 0x1.173ed01080b10p+1, 0x1.a36c31db0b92bp-1, -0x1.25a5ac0f8f3d9p-1, 0x8b9f680840587f07p-62L, "RoPE theta=1e4, d=128, i=63"},
    {0x1.e459c57e28a47p-14, -0x1.0c80000000000p-68, 0x1.0000000000000p+40, -0x1.064f226c6462ep-2, -0x1.0373257e27290p-2, 0x1.ef4b159bc1a75p-1, -0x83279136323171d4p-65L, "RoPE theta=1e4, d=128, i=63"},
    {0x1.e459c57e28a47p-14, -0x1.0c80000000000p-68, 0x1.0000000000001p+52, 0x1.c75bbe7ca3f0ep-5, 0x1.c71fb92a0709ep-5, 0x1.ff358f888c145p-1, 0xe3addf3e51f87247p-68L, "RoPE theta=1e4, d=128, i=63"},
    {0x1.e459c57e28a47p-14, -0x1.0c80000000000p-68, -0x1.0000000000060p+47, 0x1.5f53700212143p+0, 0x1.f5f406a0cab05p-1, 0x1.93b8cbd31823bp-3, 0xafa9b801090a1a81p-63L, "RoPE theta=1e4, d=128, i=63"},
    {0x1.0c6f7a0b5ed8dp-20, 0x1.b600000000000p-75, 0x1.0000000000000p+62, -0x1.91e092933d3b1p+1, -0x1.f91573b1b3dfcp-10, -0x1.ffffc1b7a1f24p-1, -0xc8f049499e9d854bp-62L, "w = 1e-6"},
    {0x1.0c6f7a0b5ed8dp-20, 0x1.b600000000000p-75, -0x1.0000000000000p+40, 0x1.d1953a2e1d064p+0, 0x1.f05986da37de3p-1, -0x1.f67d3b65ab910p-3, 0xe8ca9d170e832383p-63L, "w = 1e-6"},
    {0x1.999999999999ap-4, -0x1.9980000000000p-58, 0x1.0000000000000p+60, -0x1.0cbd3cfa7e2f5p+1, -0x1.ba15fd98709a3p-1, -0x1.024572e3aa00ap-1, -0x865e9e7d3f17a6e2p-62L, "w = 0.1"},
    {0x1.999999999999ap-4, -0x1.9980000000000p-58, 0x1.7979cfe3d85cdp+60, -0x1.5a2380d88af32p+1, -0x1.b1bcaf937397cp-2, -0x1.cfcd3dfb44db4p-1, -0xad11c06c45798f90p-62L, "w = 0.1, ns timestamp"},
    {0x1.0000000000000p+0, 0x0.0p+0, 0x1.7979cfe3d85cdp+60, -0x1.eeb0a3e63d47ap+0, -0x1.dee475f08d30bp-1, -0x1.6a3fb067b4b8ap-2, -0xf75851f31ea3cd92p-63L, "w = 1, ns timestamp"},
    {0x1.0000000000000p+0, 0x0.0p+0, 0x1.0000000000000p+62, -0x1.2e591e34ee1cbp+1, -0x1.67e57355f0147p-1, -0x1.6c2b1f820c708p-1, -0x972c8f1a770e59ffp-62L, "w = 1"},
    {0x1.0000000000000p+0, 0x0.0p+0, -0x1.ffffffffffffep+61, 0x1.19f84947d74e1p+1, 0x1.9d13e81bbd8cbp-1, -0x1.2e81e8f31fb8ep-1, 0x8cfc24a3eba70accp-62L, "w = 1"},
    {0x1.5555555555555p-1, 0x1.5580000000000p-55, 0x1.fffffffffffffp+63, -0x1.908485ec06ee1p+0, -0x1.fffd6b8f7feacp-1, 0x1.9b2ea76f5e98ap-8, -0xc84242f60377083dp-63L, "w = 2/3"},
    {0x1.0000000000000p+0, 0x0.0p+0, 0x1.0000000000000p+80, -0x1.082d219bb0225p+0, -0x1.b7727fa80ca37p-1, 0x1.06bc5dfae2da3p-1, -0x841690cdd81126d6p-63L, "w = 1 beyond the guarantee"},
    {0x1.5555555555555p-2, 0x1.5580000000000p-56, 0x1.0000000000000p+100, 0x1.82ca6ca808e3dp+1, 0x1.e97ce226cff66p-4, -0x1.fc54b41194789p-1, 0xc16536540471e5cfp-62L, "w = 1/3, 2^100"},
    {0x1.0000000000000p+0, 0x0.0p+0, 0x1.921fb54442d18p+2, -0x1.1a62633145c07p-52, -0x1.1a62633145c07p-52, 0x1.0000000000000p+0, -0x8d313198a2e03707p-115L, "t = fl(2 pi k), k=1"},
    {0x1.0000000000000p+0, 0x0.0p+0, 0x1.2d97c7f3321d2p+2, -0x1.921fb54442d19p+0, -0x1.0000000000000p+0, -0x1.a79394c9e8a0ap-53, -0xc90fdaa22168c8d3p-63L, "t = fl(pi/2 (2k+1)), k=1"},
    {0x1.0000000000000p+0, 0x0.0p+0, 0x1.2d97c7f3321d2p+4, -0x1.a79394c9e8a0ap-51, -0x1.a79394c9e8a0ap-51, 0x1.0000000000000p+0, -0xd3c9ca64f450528bp-114L, "t = fl(2 pi k), k=3"},
    {0x1.0000000000000p+0, 0x0.0p+0, 0x1.5fdbbe9bba775p+3, -0x1.921fb54442d1ap+0, -0x1.0000000000000p+0, -0x1.ee2c2d963a10cp-52, -0xc90fdaa22168d1a6p-63L, "t = fl(pi/2 (2k+1)), k=3"},
    {0x1.0000000000000p+0, 0x0.0p+0, 0x1.921fce663e25dp+22, 0x1.da578b28940c8p-32, 0x1.da578b28940c8p-32, 0x1.0000000000000p+0, 0xed2bc5944a063ecbp-95L, "t = fl(2 pi k), k=1048577"},
    {0x1.0000000000000p+0, 0x0.0p+0, 0x1.921fdaf73bcffp+21, -0x1.921fb54398774p+0, -0x1.0000000000000p+0, 0x1.54b4825580f2fp-33, -0xc90fdaa1cc3ba19fp-63L, "t = fl(pi/2 (2k+1)), k=1048577"},
    {0x1.0000000000000p+0, 0x0.0p+0, 0x1.921fb5444dd06p+42, -0x1.2f33b03fdaf24p-13, -0x1.2f33b02e2232fp-13, 0x1.ffffffa63926ap-1, -0x9799d81fed791ec5p-76L, "t = fl(2 pi k), k=1099511627783"},
    {0x1.0000000000000p+0, 0x0.0p+0, 0x1.921fb5444e997p+41, -0x1.9224275746a27p+0, -0x1.ffffffec3c92fp-1, -0x1.1c84c0f092dfep-14, -0xc91213aba3513a4ep-63L, "t = fl(pi/2 (2k+1)), k=1099511627783"},
    {0x1.0000000000000p+0, 0x0.0p+0, 0x1.ffffffffffffep+44, 0x1.966f58862bf99p-1, 0x1.6d12febca27dbp-1, 0x1.66fa3bec0c021p-1, 0xcb37ac4315fccafdp-64L, "|w t| at the 2^45 switch"},
    {0x1.0000000000000p+0, 0x0.0p+0, 0x1.0000000000000p+45, 0x1.9a6f58862bf99p-1, 0x1.6fde1730cde37p-1, 0x1.641d49e1cdd35p-1, 0xcd37ac4315fccafdp-64L, "|w t| at the 2^45 switch"},
    {0x1.0000000000000p+0, 0x0.0p+0, 0x1.0000000000002p+45, 0x1.a26f58862bf99p-1, 0x1.7562fea06d97ep-1, 0x1.5e52bffd71722p-1, 0xd137ac4315fccafdp-64L, "|w t| at the 2^45 switch"},
    {0x1.f2a79d6b34ac7p-2, 0x1.0000000000000p-59, 0x1.06d9e87713534p+46, 0x1.9c61791a6b174p-1, 0x1.7137e0060defep-1, 0x1.62b6bb2365fbbp-1, 0xce30bc8d358b9c57p-64L, "RoPE i=5 at the switch"},
};
// clang-format on

// |a - b| as angles: the difference reduced to [-π, π] in long double, so that comparing
// r = π + δ with r_ref = -π + δ' costs no double rounding of 2π.
long double angle_diff(long double a, long double b) {
  const long double two_pi = 6.283185307179586476925286766559005768L;
  long double d = a - b;
  d -= two_pi * std::nearbyint(d / two_pi);
  return std::fabs(d);
}

double phase_bound(const TableCase& k) { return std::fabs(k.w_hi * k.t); }

#if defined(__SIZEOF_FLOAT128__) && defined(__x86_64__) && !defined(PEAL_TEST_NO_FLOAT128)
#define PEAL_TEST_HAVE_QUAD 1
__extension__ typedef __float128 quad;

struct QuadRef {
  // 2π = Σ pieces + O(2^-260); each piece has ≤ 15 significant bits (mpmath).
  static constexpr double pieces[17] = {
      0x1.921cp+2,   0x1.daa0p-13,  0x1.10b4p-28,  0x1.8468p-46,  0x1.898cp-62,  0x1.8a2cp-79,
      0x1.01b8p-94,  0x1.cd10p-113, 0x1.4810p-128, 0x1.3820p-143, 0x1.14ccp-158, 0x1.cc74p-173,
      0x1.05dcp-196, 0x1.a98cp-211, 0x1.6270p-226, 0x1.b224p-241, 0x1.14a0p-257};

  static quad two_pi() {
    quad s = 0;
    for (int i = 16; i >= 0; --i) s += quad(pieces[i]);
    return s;
  }
  // Nearest integer for |x| < 2^111.
  static quad nint(quad x) {
    const quad magic = quad(0x1.8p52) * quad(0x1p60);
    return (x + magic) - magic;
  }
  // x - 2πk with k = nint(x/2π): every k·piece is exact for |k| < 2^98, and so is each
  // partial difference while it has ≤ 113 bits; the last ones round at ~2^-111.
  static quad reduce(quad x) {
    for (int pass = 0; pass < 2; ++pass) {
      const quad k = nint(x / two_pi());
      for (double p : pieces) x -= k * quad(p);
    }
    return x;
  }
  // The exact phase (w_hi + w_lo) t reduced to [-π, π] (|w t| < 2^100).
  static quad angle(double w_hi, double w_lo, double t) {
    return reduce(reduce(quad(w_hi) * quad(t)) + reduce(quad(w_lo) * quad(t)));
  }
  // sin, cos of r, |r| ≤ 2^20: quadrant by π/2 = pieces/4 (j·piece/4 exact), then the
  // Taylor series to x^33 (remainder < 1e-40 on [-π/4, π/4]).
  static void sincos(quad r, quad& s, quad& c) {
    const quad j = nint(r / (two_pi() / 4));
    quad x = r;
    for (double p : pieces) x -= j * (quad(p) / 4);
    const quad z = x * x;
    quad ts = 0, tc = 0, term_s = x, term_c = 1;
    for (int n = 0; n < 17; ++n) {
      ts += term_s;
      tc += term_c;
      term_s = -term_s * z / quad((2 * n + 2) * (2 * n + 3));
      term_c = -term_c * z / quad((2 * n + 1) * (2 * n + 2));
    }
    const int q = static_cast<int>(static_cast<double>(j)) & 3;
    const quad sin_r[4] = {ts, tc, -ts, -tc}, cos_r[4] = {tc, -ts, -tc, ts};
    s = sin_r[q];
    c = cos_r[q];
  }
};
constexpr double QuadRef::pieces[17];

double quad_angle_error(double r, double w_hi, double w_lo, double t) {
  quad d = quad(r) - QuadRef::angle(w_hi, w_lo, t);
  d -= QuadRef::two_pi() * QuadRef::nint(d / QuadRef::two_pi());
  return std::fabs(static_cast<double>(d));
}
long double quad_angle_error_ld(long double r, double w_hi, double w_lo, double t) {
  quad d = quad(r) - QuadRef::angle(w_hi, w_lo, t);
  d -= QuadRef::two_pi() * QuadRef::nint(d / QuadRef::two_pi());
  return std::fabs(static_cast<long double>(d));
}
// |computed - exact| for sin and cos of the phase (max of the two).
double quad_sincos_error(double s, double c, double w_hi, double w_lo, double t) {
  quad qs, qc;
  QuadRef::sincos(QuadRef::angle(w_hi, w_lo, t), qs, qc);
  const double es = std::fabs(static_cast<double>(quad(s) - qs));
  const double ec = std::fabs(static_cast<double>(quad(c) - qc));
  return es > ec ? es : ec;
}
#endif

// Frequencies the way presets make them: ω in long double, then split.
struct Freq {
  double hi, lo;
};
Freq freq(long double w) {
  const auto p = pd::split(w);
  return {p.first, p.second};
}
std::vector<Freq> rope_freqs(long double theta, int d) {
  std::vector<Freq> f;
  for (int i = 0; i < d / 2; ++i) f.push_back(freq(std::pow(theta, -2.0L * i / d)));
  return f;
}
std::vector<Freq> random_freqs(std::mt19937_64& rng, int n) {
  std::uniform_real_distribution<long double> u(std::log(1e-6L), 0.0L);
  std::vector<Freq> f;
  for (int i = 0; i < n; ++i) f.push_back(freq(std::exp(u(rng))));
  return f;
}
// Positions named in the brief, both signs, and log-uniform ones up to 2^64.
std::vector<double> test_positions(std::mt19937_64& rng, int n_random) {
  std::vector<double> t = {0.0,    1e-300,  0x1p-1074, 1e-8,     1.0,        4095.0,
                           1e6,    0x1p24,  0x1p40,    0x1p52,   0x1p52 + 1, 0x1p62,
                           1.7e18, 0x1p64,  12345.678, 131071.0, -1.0,       -4095.0,
                           -1e6,   -0x1p40, -0x1p52,   -1.7e18,  -0x1p62};
  std::uniform_real_distribution<double> e(0.0, 64.0), m(1.0, 2.0);
  for (int i = 0; i < n_random; ++i) {
    const double mant = m(rng);  // two statements: argument order is unspecified
    const double v = std::ldexp(mant, static_cast<int>(e(rng)));
    t.push_back(i % 2 ? -v : v);
  }
  return t;
}

bool is_nan(double x) { return x != x; }

}  // namespace

TEST_CASE("split gives a normalized pair that sums to w", "[angle]") {
  for (long double w :
       {1.0L, 0.1L, 1e-6L, std::pow(10000.0L, -2.0L * 17 / 128), -3.14159265358979323846L, 0.0L}) {
    const auto p = pd::split(w);
    if (std::numeric_limits<long double>::digits <= 106) {
      CHECK(static_cast<long double>(p.first) + static_cast<long double>(p.second) == w);
    }
    const double ulp_hi = p.first == 0 ? 0.0 : std::ldexp(1.0, std::ilogb(p.first) - 52);
    CHECK(std::fabs(p.second) <= 0.5 * ulp_hi);
  }
}

TEST_CASE("error-free transformations", "[angle]") {
  SECTION("two_prod and two_sum are exact") {
    double p, e;
    pd::eft::two_prod(1 + 0x1p-30, 1 + 0x1p-30, p, e);
    CHECK(p == 1 + 0x1p-29);
    CHECK(e == 0x1p-60);
    pd::eft::two_prod(-(1 + 0x1p-52), 1 + 0x1p-52, p, e);  // -(1 + 2^-51 + 2^-104)
    CHECK(p == -(1 + 0x1p-51));
    CHECK(e == -0x1p-104);
    double s;
    pd::eft::two_sum(1.0, 0x1p-60, s, e);
    CHECK(s == 1.0);
    CHECK(e == 0x1p-60);
    pd::eft::two_sum(0x1p-60, -1.0, s, e);  // no ordering precondition
    CHECK(s == -1.0);
    CHECK(e == 0x1p-60);
    long double pl, el;
    pd::eft::two_prod_dekker(1 + 0x1p-40L, 1 + 0x1p-40L, pl, el);
    CHECK(pl + el == pl);  // el below ulp(pl) …
    CHECK(el == (std::numeric_limits<long double>::digits >= 64 ? 0x1p-80L : el));
#if defined(PEAL_TEST_HAVE_QUAD)
    std::mt19937_64 rng(7);
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    for (int i = 0; i < 1000; ++i) {
      const double a = std::ldexp(u(rng), i % 40 - 20), b = std::ldexp(u(rng), i % 13);
      pd::eft::two_prod(a, b, p, e);
      CHECK(quad(p) + quad(e) == quad(a) * quad(b));
      pd::eft::two_sum(a, b, s, e);
      CHECK(quad(s) + quad(e) == quad(a) + quad(b));
    }
#endif
  }
  SECTION("round_small and round_to_int: nearest, ties to even, large and special values") {
    const double cases[][2] = {{0.5, 0.0},
                               {1.5, 2.0},
                               {2.5, 2.0},
                               {-0.5, -0.0},
                               {-2.5, -2.0},
                               {0.49999999999999994, 0.0},
                               {0x1p51 - 0.5, 0x1p51},
                               {-0x1p51 + 0.5, -0x1p51},
                               {-7.75, -8.0}};
    for (const auto& c : cases) {
      CHECK(pd::eft::round_small(c[0]) == c[1]);
      CHECK(pd::eft::round_to_int(c[0]) == c[1]);
    }
    const double big[][2] = {{0x1p52 - 0.5, 0x1p52},           {-0x1p52 + 0.5, -0x1p52},
                             {0x1p51 + 0.5, 0x1p51},           {-0x1p51 - 0.5, -0x1p51},
                             {0x1p51 + 1.5, 0x1p51 + 2},       {-(0x1p51 + 1.5), -(0x1p51 + 2)},
                             {0x1p52 + 1, 0x1p52 + 1},         {-0x1p52 - 1, -0x1p52 - 1},
                             {0x1p60 + 0x1p8, 0x1p60 + 0x1p8}, {1e300, 1e300}};
    for (const auto& c : big) CHECK(pd::eft::round_to_int(c[0]) == c[1]);
    const double inf = std::numeric_limits<double>::infinity();
    CHECK(pd::eft::round_to_int(inf) == inf);
    CHECK(pd::eft::round_to_int(-inf) == -inf);
    CHECK(is_nan(pd::eft::round_to_int(std::nan(""))));
    CHECK(is_nan(pd::eft::round_small(std::nan(""))));
  }
}

TEST_CASE("reduced_angle matches exact phases (mpmath table)", "[angle]") {
  for (const TableCase& k : kTable) {
    const double x = phase_bound(k);
    CAPTURE(k.note, k.w_hi, k.w_lo, k.t, k.r);
    const double r = pd::reduced_angle(k.w_hi, k.w_lo, k.t);
    CHECK(angle_diff(r, k.r_ld) <= tol_angle(x));
    CHECK(std::fabs(r) < 3.2);
    // Both algorithms wherever they are valid: they must agree either side of 2^45.
    const double rt = pd::reduced_angle_turns(k.w_hi, k.w_lo, k.t);
    CHECK(angle_diff(rt, k.r_ld) <= tol_angle(x));
    CHECK(std::fabs(rt) <= 3.1415926535897936);
    if (x <= pd::cody_waite_limit) {
      CHECK(angle_diff(pd::reduced_angle_cody_waite(k.w_hi, k.w_lo, k.t), k.r_ld) <= tol_angle(x));
    }
  }
}

TEST_CASE("sin and cos of exact phases (mpmath table)", "[angle][sincos]") {
  for (const TableCase& k : kTable) {
    const double tol = tol_phase_sincos(phase_bound(k)) + kTableRounding;
    CAPTURE(k.note, k.w_hi, k.w_lo, k.t);
    double s, c;
    pd::sincos_reduced(pd::reduced_angle(k.w_hi, k.w_lo, k.t), s, c);
    CHECK(std::fabs(s - k.s) <= tol);
    CHECK(std::fabs(c - k.c) <= tol);
    // The batch entry point with n = 1, double and float outputs.
    pd::angles_sincos(&k.w_hi, &k.w_lo, k.t, 1, &s, &c);
    CHECK(std::fabs(s - k.s) <= tol);
    CHECK(std::fabs(c - k.c) <= tol);
    float sf, cf;
    pd::angles_sincos(&k.w_hi, &k.w_lo, k.t, 1, &sf, &cf);
    CHECK(std::fabs(sf - k.s) <= kTolFloat);
    CHECK(std::fabs(cf - k.c) <= kTolFloat);
  }
}

TEST_CASE("w_lo is honoured", "[angle]") {
  // RoPE frequency θ^(-2·17/128), θ = 1e4, at t = 2^40: w_lo t ≈ 4e-5 rad, far above the
  // tolerance, so a reduction that dropped w_lo would fail the table test.
  const Freq f = freq(std::pow(10000.0L, -2.0L * 17 / 128));
  REQUIRE(f.lo != 0.0);
  const double t = 0x1p40;
  const double with = pd::reduced_angle(f.hi, f.lo, t);
  const double without = pd::reduced_angle(f.hi, 0.0, t);
  CHECK(angle_diff(with, without) > 1e-6);
  CHECK(angle_diff(with - without, static_cast<long double>(f.lo) * t) <= 2 * kTolAngle);
}

TEST_CASE("sincos_reduced at quadrant boundaries and over its range", "[sincos]") {
  std::vector<double> r = {0.0, -0.0, 1e-300, -1e-300, 0x1p-1074, 1e-8,    -1e-8,
                           3.2, -3.2, 4.0,    -4.0,    0x1p20,    -0x1p20, 1e5 + 0.25};
  // Just either side of ±qπ/4, q = 1…7: odd q is where j changes (±π/4, ±3π/4, ±5π/4,
  // ±7π/4), even q where sin or cos crosses 0 or ±1.
  const long double quarter = 0.785398163397448309615660845819875721L;
  for (int q : {1, 2, 3, 4, 5, 6, 7}) {
    for (int sign : {1, -1}) {
      double v = static_cast<double>(sign * q * quarter);
      double up = v, down = v;
      r.push_back(v);
      for (int i = 0; i < 3; ++i) {
        up = std::nextafter(up, 10.0);
        down = std::nextafter(down, -10.0);
        r.push_back(up);
        r.push_back(down);
      }
    }
  }
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<double> u(-4.0, 4.0);
  for (int i = 0; i < 20000; ++i) r.push_back(u(rng));
  std::uniform_real_distribution<double> wide(-0x1p20, 0x1p20);  // the documented range
  for (int i = 0; i < 2000; ++i) r.push_back(wide(rng));
  double max_err = 0;
  for (double x : r) {
    double s, c;
    pd::sincos_reduced(x, s, c);
#if defined(PEAL_TEST_HAVE_QUAD)
    quad qs, qc;
    QuadRef::sincos(quad(x), qs, qc);
    const double es = std::fabs(static_cast<double>(quad(s) - qs));
    const double ec = std::fabs(static_cast<double>(quad(c) - qc));
    const double tol = kTolSinCos;
#else
    const long double xl = x;
    const double es = static_cast<double>(std::fabs(s - std::sin(xl)));
    const double ec = static_cast<double>(std::fabs(c - std::cos(xl)));
    // sinl/cosl are ~1 ulp of long double; where long double is double, of double.
    const double tol = kTolSinCos + 2 * static_cast<double>(kEpsLd);
#endif
    CAPTURE(x, s, c);
    CHECK(es <= tol);
    CHECK(ec <= tol);
    max_err = std::max(max_err, std::max(es, ec));
  }
  CAPTURE(max_err);
  CHECK(max_err <= kTolSinCos);
}

TEST_CASE("NaN and infinite positions give NaN", "[angle][sincos]") {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::nan("");
  for (double t : {nan, inf, -inf}) {
    CAPTURE(t);
    CHECK(is_nan(pd::reduced_angle(0.5, 1e-20, t)));
    CHECK(is_nan(pd::reduced_angle_cody_waite(0.5, 1e-20, t)));
    CHECK(is_nan(pd::reduced_angle_turns(0.5, 1e-20, t)));
    CHECK(is_nan(pd::reduced_angle(0.0, 0.0, t)));  // 0·Inf
    CHECK(is_nan(static_cast<double>(pd::reduced_angle(0.5L, static_cast<long double>(t)))));
    double s, c;
    pd::sincos_reduced(t, s, c);
    CHECK(is_nan(s));
    CHECK(is_nan(c));
    const double w_hi[3] = {1.0, 0.5, 1e-4}, w_lo[3] = {0.0, 1e-20, -1e-22};
    double sb[3], cb[3];
    float sf[3], cf[3];
    pd::angles_sincos(w_hi, w_lo, t, 3, sb, cb);
    pd::angles_sincos(w_hi, w_lo, t, 3, sf, cf);
    for (int i = 0; i < 3; ++i) {
      CHECK(is_nan(sb[i]));
      CHECK(is_nan(cb[i]));
      CHECK(std::isnan(sf[i]));
      CHECK(std::isnan(cf[i]));
    }
  }
}

TEST_CASE("long double reduction", "[angle]") {
  for (const TableCase& k : kTable) {
    const double x = phase_bound(k);
    if (x > 0x1p62) continue;
    CAPTURE(k.note, k.w_hi, k.w_lo, k.t);
    const long double w = static_cast<long double>(k.w_hi) + k.w_lo;
    if (std::numeric_limits<long double>::digits < 64 && k.w_lo != 0) continue;
    const long double r = pd::reduced_angle(w, static_cast<long double>(k.t));
    CHECK(angle_diff(r, k.r_ld) <= kTolAngleLd);
    CHECK(std::fabs(r) < 3.6L);
  }
#if defined(PEAL_TEST_HAVE_QUAD)
  if (std::numeric_limits<long double>::digits == 64) {
    std::mt19937_64 rng(3);
    std::uniform_real_distribution<long double> lw(std::log(1e-6L), std::log(4.0L));
    long double max_err = 0;
    for (double t : test_positions(rng, 400)) {
      for (int i = 0; i < 20; ++i) {
        const long double w = std::exp(lw(rng));
        const auto p = pd::split(w);
        if (std::fabs(p.first * t) > 0x1p62) continue;
        const long double r = pd::reduced_angle(w, static_cast<long double>(t));
        const long double err = quad_angle_error_ld(r, p.first, p.second, t);
        CAPTURE(w, t, r, err);
        CHECK(err <= kTolAngleLd);
        max_err = std::max(max_err, err);
      }
    }
    CAPTURE(max_err);
    CHECK(max_err <= kTolAngleLd);
  }
#endif
}

#if defined(PEAL_TEST_HAVE_QUAD)
TEST_CASE("random phases against the binary128 reference", "[angle][sincos]") {
  std::mt19937_64 rng(2024);
  std::vector<Freq> freqs = rope_freqs(10000.0L, 128);
  for (const Freq& f : rope_freqs(500000.0L, 128)) freqs.push_back(f);
  for (const Freq& f : random_freqs(rng, 200)) freqs.push_back(f);
  const std::vector<double> positions = test_positions(rng, 60);
  double max_angle = 0, max_cw = 0, max_sincos = 0;
  for (double t : positions) {
    for (const Freq& f : freqs) {
      const double x = std::fabs(f.hi * t);
      CAPTURE(f.hi, f.lo, t);
      const double r = pd::reduced_angle(f.hi, f.lo, t);
      const double ea = quad_angle_error(r, f.hi, f.lo, t);
      CHECK(ea <= tol_angle(x));
      CHECK(std::fabs(r) < 3.2);
      max_angle = std::max(max_angle, ea);
      const double et = quad_angle_error(pd::reduced_angle_turns(f.hi, f.lo, t), f.hi, f.lo, t);
      CHECK(et <= tol_angle(x));
      max_angle = std::max(max_angle, et);
      if (x <= pd::cody_waite_limit) {
        const double ec =
            quad_angle_error(pd::reduced_angle_cody_waite(f.hi, f.lo, t), f.hi, f.lo, t);
        CHECK(ec <= tol_angle(x));
        max_cw = std::max(max_cw, ec);
      }
      double s, c;
      pd::sincos_reduced(r, s, c);
      const double es = quad_sincos_error(s, c, f.hi, f.lo, t);
      CHECK(es <= tol_phase_sincos(x));
      max_sincos = std::max(max_sincos, es);
    }
  }
  CAPTURE(max_angle, max_cw, max_sincos);
  CHECK(max_angle <= kTolAngle);
  CHECK(max_sincos <= tol_phase_sincos(0x1p64));
}

TEST_CASE("the turns path stays exact far beyond 2^62", "[angle]") {
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> e(62.0, 99.0), m(1.0, 2.0);
  for (const Freq& f : random_freqs(rng, 300)) {
    const double mant = m(rng);
    const double t = std::ldexp(mant, static_cast<int>(e(rng))) / f.hi;
    const double x = std::fabs(f.hi * t);
    CAPTURE(f.hi, f.lo, t, x);
    const double r = pd::reduced_angle(f.hi, f.lo, t);
    CHECK(quad_angle_error(r, f.hi, f.lo, t) <= tol_angle(x));
    CHECK(std::fabs(r) <= 3.1415926535897936);
  }
  // Absurd magnitudes: no accuracy promised, but a finite angle within [-π, π]. (Without
  // hardware FMA, Dekker's split overflows from 2^995 on and gives NaN: angle.hpp.)
  const double huge = PEAL_DETAIL_HAS_FMA ? std::numeric_limits<double>::max() : 0x1p900;
  for (double t : {0x1p200, -0x1p500, huge, -huge}) {
    const double r = pd::reduced_angle_turns(0.75, 1e-17, t);
    CAPTURE(t, r);
    CHECK(std::fabs(r) <= 3.1415926535897936);
  }
}
#endif

TEST_CASE("angles_sincos: awkward lengths, misaligned starts, both paths", "[sincos]") {
  std::mt19937_64 rng(5);
  std::vector<Freq> pool = rope_freqs(10000.0L, 256);
  for (const Freq& f : random_freqs(rng, 200)) pool.push_back(f);
  std::vector<double> hi, lo;
  for (const Freq& f : pool) {
    hi.push_back(f.hi);
    lo.push_back(f.lo);
  }
  // 2^40 keeps every RoPE angle on the Cody–Waite path; 2^47 and 1.7e18 send the batch down
  // the turns path (the first only because of its highest frequencies).
  for (double t : {0.0, 1.0, -12345.678, 0x1p40, 0x1p47, -1.7e18}) {
    for (int n : {0, 1, 3, 7, 8, 9, 15, 16, 17, 31, 33, 64, 65, 127, 200}) {
      for (int off : {0, 1, 3}) {
        CAPTURE(t, n, off);
        std::vector<double> s(n + 2, 7.0), c(n + 2, 7.0);
        std::vector<float> sf(n + 2, 7.0f), cf(n + 2, 7.0f);
        pd::angles_sincos(hi.data() + off, lo.data() + off, t, n, s.data() + 1, c.data() + 1);
        pd::angles_sincos(hi.data() + off, lo.data() + off, t, n, sf.data() + 1, cf.data() + 1);
        // Nothing written outside [1, n].
        CHECK(s[0] == 7.0);
        CHECK(c[n + 1] == 7.0);
        CHECK(sf[n + 1] == 7.0f);
        CHECK(cf[0] == 7.0f);
        for (int i = 0; i < n; ++i) {
          const double wh = hi[off + i], wl = lo[off + i];
          const double x = std::fabs(wh * t);
          // Scalar pipeline: the same arithmetic, so it must agree to the last bits.
          double s_ref, c_ref;
          pd::sincos_reduced(pd::reduced_angle(wh, wl, t), s_ref, c_ref);
          CHECK(std::fabs(s[i + 1] - s_ref) <= 2 * tol_phase_sincos(x));
          CHECK(std::fabs(c[i + 1] - c_ref) <= 2 * tol_phase_sincos(x));
#if defined(PEAL_TEST_HAVE_QUAD)
          CHECK(quad_sincos_error(s[i + 1], c[i + 1], wh, wl, t) <= tol_phase_sincos(x));
#endif
          CHECK(std::fabs(sf[i + 1] - s_ref) <= kTolFloat);
          CHECK(std::fabs(cf[i + 1] - c_ref) <= kTolFloat);
        }
      }
    }
  }
}

// ===== Exact reduction of every finite phase (detail/math/angle_exact.hpp) ========================
// Independent references, none of which reads the library's table of 1/(2π):
//  - Big: unsigned big integers. π·2^n from Machin's formula π = 16 atan(1/5) − 4 atan(1/239);
//    the exact phase (w_hi + w_lo)·t, an integer times a power of two, reduced mod 2π by long
//    division by 2π·2^N. The same π verifies the table itself.
//  - glibc's sinl/cosl (x87 long double), which reduce any argument exactly.
//  - Identities of an exact reduction: r(2t) ≡ 2 r(t), r(−t) = −r(t).
// Every check runs on this file's build (FMA with -march=native) and on the build of
// tests/test_angle_nofma.cpp (Dekker's products, no FMA instruction).
namespace {

namespace nofma = peal_test_nofma;

struct Big {  // unsigned, 32-bit limbs, least significant first, no leading zero limbs
  std::vector<std::uint32_t> d;
  Big() = default;
  explicit Big(std::uint64_t v) {
    if (v) d.push_back(static_cast<std::uint32_t>(v));
    if (v >> 32) d.push_back(static_cast<std::uint32_t>(v >> 32));
  }
  bool zero() const { return d.empty(); }
  void trim() {
    while (!d.empty() && d.back() == 0) d.pop_back();
  }
  long bits() const {
    if (d.empty()) return 0;
    long b = 32 * static_cast<long>(d.size());
    for (std::uint32_t top = d.back(); !(top >> 31); top <<= 1) --b;
    return b;
  }
  bool bit(long i) const {
    return i >= 0 && static_cast<std::size_t>(i / 32) < d.size() &&
           ((d[static_cast<std::size_t>(i / 32)] >> (i % 32)) & 1u);
  }
};
Big shl(const Big& a, long s) {
  if (a.zero()) return a;
  Big r;
  r.d.assign(static_cast<std::size_t>(s / 32), 0);
  const int b = static_cast<int>(s % 32);
  std::uint32_t carry = 0;
  for (std::uint32_t x : a.d) {
    r.d.push_back((x << b) | carry);
    carry = b ? x >> (32 - b) : 0;
  }
  r.d.push_back(carry);
  r.trim();
  return r;
}
Big shr(const Big& a, long s) {
  Big r;
  const int b = static_cast<int>(s % 32);
  for (std::size_t i = static_cast<std::size_t>(s / 32); i < a.d.size(); ++i) {
    const std::uint64_t hi = i + 1 < a.d.size() ? a.d[i + 1] : 0;
    r.d.push_back(static_cast<std::uint32_t>((std::uint64_t(a.d[i]) | hi << 32) >> b));
  }
  r.trim();
  return r;
}
int cmp(const Big& a, const Big& b) {
  if (a.d.size() != b.d.size()) return a.d.size() < b.d.size() ? -1 : 1;
  for (std::size_t i = a.d.size(); i-- > 0;)
    if (a.d[i] != b.d[i]) return a.d[i] < b.d[i] ? -1 : 1;
  return 0;
}
Big add(const Big& a, const Big& b) {
  Big r;
  std::uint64_t c = 0;
  for (std::size_t i = 0; i < std::max(a.d.size(), b.d.size()); ++i) {
    c += std::uint64_t(i < a.d.size() ? a.d[i] : 0) + (i < b.d.size() ? b.d[i] : 0);
    r.d.push_back(static_cast<std::uint32_t>(c));
    c >>= 32;
  }
  if (c) r.d.push_back(static_cast<std::uint32_t>(c));
  return r;
}
Big sub(const Big& a, const Big& b) {  // a ≥ b
  Big r = a;
  std::int64_t borrow = 0;
  for (std::size_t i = 0; i < r.d.size(); ++i) {
    std::int64_t v = std::int64_t(r.d[i]) - (i < b.d.size() ? b.d[i] : 0) - borrow;
    borrow = v < 0 ? 1 : 0;
    r.d[i] = static_cast<std::uint32_t>(v + (borrow << 32));
  }
  r.trim();
  return r;
}
Big mul(const Big& a, const Big& b) {
  if (a.zero() || b.zero()) return Big();
  Big r;
  r.d.assign(a.d.size() + b.d.size(), 0);
  for (std::size_t i = 0; i < a.d.size(); ++i) {
    std::uint64_t carry = 0;
    for (std::size_t j = 0; j < b.d.size(); ++j) {
      const std::uint64_t t = r.d[i + j] + std::uint64_t(a.d[i]) * b.d[j] + carry;
      r.d[i + j] = static_cast<std::uint32_t>(t);
      carry = t >> 32;
    }
    r.d[i + b.d.size()] = static_cast<std::uint32_t>(carry);
  }
  r.trim();
  return r;
}
Big div_small(const Big& a, std::uint32_t q) {
  Big r;
  r.d.resize(a.d.size());
  std::uint64_t rem = 0;
  for (std::size_t i = a.d.size(); i-- > 0;) {
    const std::uint64_t cur = rem << 32 | a.d[i];
    r.d[i] = static_cast<std::uint32_t>(cur / q);
    rem = cur % q;
  }
  r.trim();
  return r;
}
// y mod m, bit by bit (restoring division).
Big mod(const Big& y, const Big& m) {
  const std::size_t L = m.d.size() + 1;
  std::vector<std::uint32_t> r(L, 0);
  auto ge = [&] {
    if (r[L - 1]) return true;
    for (std::size_t i = L - 1; i-- > 0;)
      if (r[i] != m.d[i]) return r[i] > m.d[i];
    return true;
  };
  for (long i = y.bits() - 1; i >= 0; --i) {
    for (std::size_t k = L; k-- > 1;) r[k] = (r[k] << 1) | (r[k - 1] >> 31);
    r[0] = (r[0] << 1) | (y.bit(i) ? 1u : 0u);
    if (ge()) {
      std::int64_t borrow = 0;
      for (std::size_t k = 0; k < L; ++k) {
        std::int64_t v = std::int64_t(r[k]) - (k < m.d.size() ? m.d[k] : 0) - borrow;
        borrow = v < 0 ? 1 : 0;
        r[k] = static_cast<std::uint32_t>(v + (borrow << 32));
      }
    }
  }
  Big out;
  out.d = r;
  out.trim();
  return out;
}

// 2^n atan(1/x) by its series. power_k = floor(2^n / x^(2k+1)) exactly (nested floors of
// integer divisions), term_k = floor(power_k / (2k+1)) is off by < 2, and the terms after the
// last nonzero power sum to < 1: the error is < 2·terms + 1.
Big atan_inv(std::uint32_t x, long n, long& terms) {
  Big power = div_small(shl(Big(1), n), x), sum = power;
  terms = 1;
  for (std::uint32_t k = 1; !power.zero(); ++k, ++terms) {
    power = div_small(power, x * x);
    const Big term = div_small(power, 2 * k + 1);
    sum = k % 2 ? sub(sum, term) : add(sum, term);
  }
  return sum;
}
struct PiFixed {
  Big p;  // |p − π·2^n| < err
  long n;
  Big err;
};
const PiFixed& pi_fixed() {
  static const PiFixed v = [] {
    PiFixed r;
    r.n = 33024 + 192;
    long t5 = 0, t239 = 0;
    const Big a = atan_inv(5, r.n, t5), b = atan_inv(239, r.n, t239);
    r.p = sub(mul(a, Big(16)), mul(b, Big(4)));
    r.err = Big(std::uint64_t(16 * (2 * t5 + 1) + 4 * (2 * t239 + 1)));
    return r;
  }();
  return v;
}

// x = ±m·2^e exactly: the significand in 32-bit chunks (frexp, then scaling by 2^32, floor
// and subtraction of the integer part, all exact in any binary format).
struct Dyadic {
  Big m;
  long e = 0;
  bool neg = false;
};
Dyadic dyadic(long double x) {
  int ex;
  long double f = std::frexp(std::fabs(x), &ex);
  const int chunks = (std::numeric_limits<long double>::digits + 31) / 32;
  Big m;
  for (int k = 0; k < chunks; ++k) {
    f = std::ldexp(f, 32);
    const long double d = std::floor(f);
    m = add(shl(m, 32), Big(static_cast<std::uint64_t>(d)));
    f -= d;
  }
  m.trim();
  return {m, long(ex) - 32L * chunks, static_cast<bool>(std::signbit(x))};
}
long double to_long_double(const Big& a, long e) {  // a·2^e from a's top 64 bits
  const long b = a.bits();
  const Big top = b > 64 ? shr(a, b - 64) : a;
  std::uint64_t v = 0;
  for (std::size_t i = top.d.size(); i-- > 0;) v = v << 32 | top.d[i];
  return std::ldexp(static_cast<long double>(v), static_cast<int>(std::max<long>(b - 64, 0) + e));
}
// A·2^E mod 2π in [−π, π]. With P = π·2^N (N = bits of the integer part + 128, P within
// 2 units of π·2^N), the remainder R of A·2^(E+N) by 2P is 2^N (X − 2πq) up to 4q units:
// below 2^-126 rad.
long double reduce_ref(const Big& a, long e) {
  if (a.zero()) return 0;
  if (a.bits() + e < -60) return to_long_double(a, e);  // X < 2^-60 < π
  const PiFixed& pi = pi_fixed();
  const long N = std::max<long>(a.bits() + e, 0) + 128;
  REQUIRE(N + 20 <= pi.n);
  const Big P = shr(pi.p, pi.n - N), twoP = shl(P, 1);
  Big R = mod(e + N >= 0 ? shl(a, e + N) : shr(a, -(e + N)), twoP);  // (shr: X < 2^-50)
  bool neg = false;
  if (cmp(R, P) > 0) {
    R = sub(twoP, R);
    neg = true;
  }
  const long double r = to_long_double(R, -N);
  return neg ? -r : r;
}
// The exact (w_hi + w_lo)·t reduced to [−π, π], long double arguments (exact as given).
long double exact_phase(long double w_hi, long double w_lo, long double t) {
  const Dyadic h = dyadic(w_hi), l = dyadic(w_lo), x = dyadic(t);
  // (±m_h 2^e_h ± m_l 2^e_l) = ±W·2^e0 with a signed integer W.
  if (h.m.zero() && l.m.zero()) return 0;
  const long e0 = h.m.zero() ? l.e : l.m.zero() ? h.e : std::min(h.e, l.e);
  const Big a = shl(h.m, h.e - e0), b = l.m.zero() ? Big() : shl(l.m, l.e - e0);
  Big w;
  bool neg;
  if (h.neg == l.neg || b.zero()) {
    w = add(a, b), neg = h.neg;
  } else if (cmp(a, b) >= 0) {
    w = sub(a, b), neg = h.neg;
  } else {
    w = sub(b, a), neg = l.neg;
  }
  const long double r = reduce_ref(mul(w, x.m), e0 + x.e);
  return (neg != x.neg) ? -r : r;
}

// Both builds of the angle code, as one set of function pointers.
struct Build {
  const char* name;
  double (*angle)(double, double, double);
  double (*exact)(double, double, double);
  long double (*angle_ld)(long double, long double);
  void (*sincos)(double, double&, double&);
  void (*batch)(const double*, const double*, double, int, double*, double*);
};
const Build kBuilds[] = {
    {"this build", [](double a, double b, double t) { return pd::reduced_angle(a, b, t); },
     [](double a, double b, double t) { return pd::reduced_angle_exact(a, b, t); },
     [](long double w, long double t) { return pd::reduced_angle(w, t); },
     [](double r, double& s, double& c) { pd::sincos_reduced(r, s, c); },
     [](const double* h, const double* l, double t, int n, double* s, double* c) {
       pd::angles_sincos(h, l, t, n, s, c);
     }},
    {"no-FMA build", nofma::reduced_angle, nofma::reduced_angle_exact, nofma::reduced_angle_ld,
     nofma::sincos_reduced,
     [](const double* h, const double* l, double t, int n, double* s, double* c) {
       nofma::angles_sincos(h, l, t, n, s, c);
     }},
};

constexpr double kPiUp = 3.1415926535897936;  // the double above π: |r| ≤ π rounds below it
const double kMax = std::numeric_limits<double>::max();

struct Phase {
  double w_hi, w_lo, t;
  const char* note;
};
// Huge phases by name: both sides of 2^64 (the switch to the exact path), the largest
// doubles, negative positions, w_lo ≠ 0, pairs that are not normalized, and the operands
// above 2^995 that Dekker's split cannot take (no-FMA build).
std::vector<Phase> named_phases() {
  const Freq r17 = freq(std::pow(10000.0L, -2.0L * 17 / 128));
  const Freq r1 = freq(std::pow(10000.0L, -2.0L / 128));
  return {{1, 0, 1e100, "omega = 1, t = 1e100"},
          {1, 0, 1e308, "t = 1e308"},
          {1, 0, kMax, "t = DBL_MAX"},
          {1, 0, -kMax, "t = -DBL_MAX"},
          {1, 0, -1.7e308, "t = -1.7e308"},
          {1, 0, 0x1p1023, "t = 2^1023"},
          {kMax, 0, kMax, "omega = t = DBL_MAX"},
          {-kMax, 0, kMax, "omega = -DBL_MAX"},
          {1, 0, 0x1p64, "|omega t| = 2^64 (turns path)"},
          {1, 0, std::nextafter(0x1p64, 0.0), "just below 2^64"},
          {1, 0, std::nextafter(0x1p64, 1e300), "just above 2^64 (exact path)"},
          {r17.hi, r17.lo, 0x1p64 / r17.hi, "RoPE i = 17 at 2^64"},
          {r17.hi, r17.lo, 1e300, "RoPE i = 17, t = 1e300, w_lo != 0"},
          {r17.hi, r17.lo, -1e200, "RoPE i = 17, t = -1e200"},
          {r1.hi, r1.lo, 0x1p70, "RoPE i = 1, t = 2^70"},
          {1, 0x1p-60, 0x1p70, "w_lo = 2^-60 at 2^70"},
          {1, 0.5, 1e20, "pair not normalized: w_lo = 0.5"},
          {0, 1e-3, 1e300, "w_hi = 0, w_lo = 1e-3"},
          {1e-300, 0, 1e300, "|omega t| = 1 with t > 2^995"},
          {0x1p1000, 0, 0x1p-1074, "omega = 2^1000, subnormal t"},
          {0x1p-1074, 0, kMax, "subnormal omega, t = DBL_MAX"},
          {1e300, 1e284, 1e-290, "omega > 2^995, |omega t| = 1e10"},
          {-0.75, 1e-17, 1e250, "negative omega"}};
}

}  // namespace

TEST_CASE("the 1/(2 pi) table is floor(2^33024 / (2 pi)) (big-integer Machin)", "[angle][exact]") {
  // T = the table as one integer, K = 33024 bits. T = floor(2^K/2π) ⟺ 0 ≤ 2^K − 2πT < 2π.
  // With |p − π·2^n| < err: D = 2^(K+n) − 2Tp is 2^n (2^K − 2πT) within 2T·err.
  const int words = pd::inv_two_pi_words;
  const long K = 64L * words;
  Big T;
  T.d.resize(std::size_t(2 * words));
  for (int k = 0; k < words; ++k) {
    const std::uint64_t w = pd::inv_two_pi_bits[k];
    const std::size_t lo = std::size_t(2 * (words - 1 - k));
    T.d[lo] = static_cast<std::uint32_t>(w);
    T.d[lo + 1] = static_cast<std::uint32_t>(w >> 32);
  }
  T.trim();
  const PiFixed& pi = pi_fixed();
  const Big lhs = shl(Big(1), K + pi.n), rhs = mul(shl(T, 1), pi.p);
  REQUIRE(cmp(lhs, rhs) > 0);
  const Big D = sub(lhs, rhs), slack = mul(shl(T, 1), pi.err);
  CHECK(cmp(D, slack) > 0);                                  // 2^K − 2πT > 0
  CHECK(cmp(add(D, slack), shl(sub(pi.p, pi.err), 1)) < 0);  // 2^K − 2πT < 2π
  // The first 192 bits against the published 2/π = 0.A2F9836E 4E441529 FC2757D1 F534DDC0
  // DB629599 3C439041 … (fdlibm k_rem_pio2.c, ipio2): 1/(2π) is 2/π shifted by two bits.
  const std::uint64_t two_over_pi[3] = {0xA2F9836E4E441529u, 0xFC2757D1F534DDC0u,
                                        0xDB6295993C439041u};
  CHECK(pd::inv_two_pi_bits[0] == two_over_pi[0] >> 2);
  CHECK(pd::inv_two_pi_bits[1] == ((two_over_pi[0] & 3) << 62 | two_over_pi[1] >> 2));
  CHECK(pd::inv_two_pi_bits[2] == ((two_over_pi[1] & 3) << 62 | two_over_pi[2] >> 2));
}

TEST_CASE("the big-integer reference reproduces known reduced angles", "[angle][exact]") {
  // Sanity of the reference itself against mpmath values (kTable) and the brief's example.
  for (const TableCase& k : kTable) {
    CAPTURE(k.note, k.t);
    CHECK(angle_diff(exact_phase(k.w_hi, k.w_lo, k.t), k.r_ld) <= kTolAngleLd);
  }
  CHECK(std::fabs(exact_phase(1, 0, 1e100) - (-0.390485843192125599512750L)) < 1e-18L);
  CHECK(std::fabs(exact_phase(1, 0, 1e308) - 2.671020314562465192571992L) < 1e-18L);
}

TEST_CASE("reduced_angle is exact for every finite phase (big-integer reference)",
          "[angle][exact]") {
  std::vector<Phase> phases = named_phases();
  std::mt19937_64 rng(42);
  std::uniform_int_distribution<int> ex(60, 1023);
  std::uniform_real_distribution<double> m(1.0, 2.0);
  std::vector<Freq> freqs = rope_freqs(10000.0L, 16);
  for (const Freq& f : random_freqs(rng, 8)) freqs.push_back(f);
  for (int i = 0; i < 150; ++i) {
    const Freq& f = freqs[std::size_t(i) % freqs.size()];
    const double mant = m(rng);
    const double t = std::ldexp(mant, ex(rng));
    phases.push_back({f.hi, f.lo, i % 2 ? -t : t, "random"});
  }
  for (const Build& b : kBuilds) {
    double max_err = 0;
    for (const Phase& p : phases) {
      CAPTURE(b.name, p.note, p.w_hi, p.w_lo, p.t);
      const long double ref = exact_phase(p.w_hi, p.w_lo, p.t);
      const double r = b.angle(p.w_hi, p.w_lo, p.t), re = b.exact(p.w_hi, p.w_lo, p.t);
      CAPTURE(r, re, ref);
      CHECK(angle_diff(r, ref) <= kTolAngle);
      CHECK(std::fabs(r) < 3.2);
      CHECK(angle_diff(re, ref) <= kTolAngle);
      CHECK(std::fabs(re) < kPiUp);
      max_err = std::max(max_err, double(angle_diff(r, ref)));
      double s, c;
      b.sincos(r, s, c);
      CHECK(std::fabs(s - std::sin(ref)) <= tol_phase_sincos(0) + 2 * kEpsLd);
      CHECK(std::fabs(c - std::cos(ref)) <= tol_phase_sincos(0) + 2 * kEpsLd);
    }
    CAPTURE(b.name, max_err);
    CHECK(max_err <= 0x1p-52 + 0x1p-60);  // ulp(r)/2 for |r| < 4 (+ the reference's rounding)
  }
}

TEST_CASE("angles_sincos: batches with huge phases", "[angle][exact][sincos]") {
  std::vector<Freq> pool = rope_freqs(10000.0L, 128);
  std::vector<double> hi, lo;
  for (const Freq& f : pool) hi.push_back(f.hi), lo.push_back(f.lo);
  for (const Build& b : kBuilds) {
    // 2^60: turns path for the high frequencies only; 1e308 and -DBL_MAX: every phase exact.
    for (double t : {0x1p60, 1e19, 1e308, -kMax, 1e100}) {
      for (int n : {1, 7, 64}) {
        CAPTURE(b.name, t, n);
        std::vector<double> s(static_cast<std::size_t>(n)), c(static_cast<std::size_t>(n));
        b.batch(hi.data(), lo.data(), t, n, s.data(), c.data());
        for (int i = 0; i < n; ++i) {
          const long double ref = exact_phase(hi[std::size_t(i)], lo[std::size_t(i)], t);
          CHECK(std::fabs(s[std::size_t(i)] - std::sin(ref)) <= tol_phase_sincos(0) + 2 * kEpsLd);
          CHECK(std::fabs(c[std::size_t(i)] - std::cos(ref)) <= tol_phase_sincos(0) + 2 * kEpsLd);
        }
      }
    }
  }
}

TEST_CASE("exact path: identities of exact reduction at every exponent", "[angle][exact]") {
  // r(2t) ≡ 2 r(t) and r(−t) = −r(t) for exact reduction; t = m·2^k over every k.
  std::mt19937_64 rng(8);
  std::uniform_real_distribution<double> m(1.0, 2.0);
  const Freq f = freq(std::pow(10000.0L, -2.0L * 5 / 128));
  for (const Build& b : kBuilds) {
    for (int k = -1074; k < 1023; k += 7) {
      const double mant = m(rng);
      const double t = std::ldexp(mant, k);
      CAPTURE(b.name, k, t);
      for (const Freq& w : {Freq{1, 0}, f}) {
        const double r1 = b.exact(w.hi, w.lo, t), r2 = b.exact(w.hi, w.lo, 2 * t);
        CHECK(angle_diff(r2, 2.0L * r1) <= 3 * kTolAngle);
        CHECK(angle_diff(b.exact(w.hi, w.lo, -t), -r1) <= kTolAngle);
        CHECK(angle_diff(b.angle(w.hi, w.lo, t), r1) <= 2 * kTolAngle);  // any path
      }
    }
  }
}

TEST_CASE("exact path agrees with the mpmath table and the fast paths", "[angle][exact]") {
  for (const Build& b : kBuilds) {
    for (const TableCase& k : kTable) {
      CAPTURE(b.name, k.note, k.t);
      CHECK(angle_diff(b.exact(k.w_hi, k.w_lo, k.t), k.r_ld) <= kTolAngle);
    }
    std::mt19937_64 rng(9);
    const std::vector<Freq> freqs = rope_freqs(10000.0L, 64);
    for (double t : test_positions(rng, 40)) {
      for (const Freq& f : freqs) {
        CAPTURE(b.name, f.hi, f.lo, t);
        CHECK(angle_diff(b.exact(f.hi, f.lo, t), b.angle(f.hi, f.lo, t)) <= 2 * kTolAngle);
      }
    }
  }
}

TEST_CASE("the exact path is bit-identical with and without FMA", "[angle][exact]") {
  REQUIRE(nofma::built_without_fma());
  std::mt19937_64 rng(10);
  std::uniform_int_distribution<int> ex(-1074, 1023);
  std::uniform_real_distribution<double> m(1.0, 2.0);
  for (int i = 0; i < 2000; ++i) {
    const double a = m(rng), b = m(rng), c = m(rng);
    const double w = std::ldexp(a, ex(rng) / 2), t = std::ldexp(b, ex(rng)),
                 lo = std::ldexp(c, ex(rng));
    CAPTURE(w, lo, t);
    CHECK(pd::reduced_angle_exact(w, lo, t) == nofma::reduced_angle_exact(w, lo, t));
    if (std::fabs(w * t) > 0x1p64)  // both builds take the exact path
      CHECK(pd::reduced_angle(w, 0.0, t) == nofma::reduced_angle(w, 0.0, t));
  }
}

TEST_CASE("the no-FMA build passes the mpmath table and the random sweeps", "[angle][sincos]") {
  REQUIRE(nofma::built_without_fma());
  for (const TableCase& k : kTable) {
    const double x = phase_bound(k);
    CAPTURE(k.note, k.w_hi, k.w_lo, k.t);
    const double r = nofma::reduced_angle(k.w_hi, k.w_lo, k.t);
    CHECK(angle_diff(r, k.r_ld) <= tol_angle(x));
    CHECK(angle_diff(nofma::reduced_angle_turns(k.w_hi, k.w_lo, k.t), k.r_ld) <= tol_angle(x));
    if (x <= pd::cody_waite_limit)
      CHECK(angle_diff(nofma::reduced_angle_cody_waite(k.w_hi, k.w_lo, k.t), k.r_ld) <=
            tol_angle(x));
    double s, c;
    nofma::sincos_reduced(r, s, c);
    CHECK(std::fabs(s - k.s) <= tol_phase_sincos(x) + kTableRounding);
    CHECK(std::fabs(c - k.c) <= tol_phase_sincos(x) + kTableRounding);
    float sf, cf;
    nofma::angles_sincos(&k.w_hi, &k.w_lo, k.t, 1, &sf, &cf);
    CHECK(std::fabs(sf - k.s) <= kTolFloat);
    CHECK(std::fabs(cf - k.c) <= kTolFloat);
    if (x <= 0x1p62 && (std::numeric_limits<long double>::digits >= 64 || k.w_lo == 0)) {
      const long double w = static_cast<long double>(k.w_hi) + k.w_lo;
      CHECK(angle_diff(nofma::reduced_angle_ld(w, k.t), k.r_ld) <= kTolAngleLd);
    }
  }
#if defined(PEAL_TEST_HAVE_QUAD)
  std::mt19937_64 rng(2025);
  std::vector<Freq> freqs = rope_freqs(10000.0L, 128);
  for (const Freq& f : random_freqs(rng, 100)) freqs.push_back(f);
  std::vector<double> hi, lo;
  for (const Freq& f : freqs) hi.push_back(f.hi), lo.push_back(f.lo);
  std::vector<double> s(freqs.size()), c(freqs.size());
  for (double t : test_positions(rng, 40)) {
    nofma::angles_sincos(hi.data(), lo.data(), t, int(freqs.size()), s.data(), c.data());
    for (std::size_t i = 0; i < freqs.size(); ++i) {
      const double x = std::fabs(hi[i] * t);
      CAPTURE(hi[i], lo[i], t);
      CHECK(quad_angle_error(nofma::reduced_angle(hi[i], lo[i], t), hi[i], lo[i], t) <=
            tol_angle(x));
      CHECK(quad_sincos_error(s[i], c[i], hi[i], lo[i], t) <= tol_phase_sincos(x));
      // The fast paths of the two builds differ only in how exact products are formed.
      CHECK(angle_diff(nofma::reduced_angle(hi[i], lo[i], t), pd::reduced_angle(hi[i], lo[i], t)) <=
            2 * tol_angle(x));
    }
  }
#endif
}

TEST_CASE("long double reduction is exact for every finite input", "[angle][exact]") {
  if (std::numeric_limits<long double>::digits != 64) return;  // the reference needs x87
  const long double big[] = {
      0x1p62L,      0x1.0000000000000002p62L, 1e100L, 1e308L, 1e4000L, -0x1p16000L, LDBL_MAX,
      -LDBL_MAX / 3};
  const long double ws[] = {1.0L, 1.1L, 0x1.23456789abcdef12p-3L, -2.5e-4L, 0x1p-16000L};
  for (const Build& b : kBuilds) {
    for (long double w : ws) {
      for (long double t : big) {
        if (std::fabs(w * t) > 0x1p2000L && std::fabs(w) != 1) continue;  // keep the division short
        CAPTURE(b.name, w, t);
        const long double ref = exact_phase(w, 0, t), r = b.angle_ld(w, t);
        CAPTURE(r, ref);
        CHECK(angle_diff(r, ref) <= kTolAngleLd);
        CHECK(std::fabs(r) <= 3.1415926535897932385L + kEpsLd * 4);
      }
    }
  }
}

#if defined(__GLIBC__) && LDBL_MANT_DIG == 64
TEST_CASE("huge phases against glibc's sinl/cosl (exact x87 reduction)", "[angle][exact]") {
  // glibc reduces any long double argument exactly (Payne–Hanek in __ieee754_rem_pio2l);
  // sin(1e22) = −0.8522008497671888017727… checks that this libm does.
  REQUIRE(std::fabs(sinl(1e22L) - (-0.85220084976718880177270589375L)) < 4 * kEpsLd);
  // ω·t is exact in long double when ω has ≤ 11 significant bits: every double t works.
  std::mt19937_64 rng(12);
  std::uniform_int_distribution<int> ex(0, 1023);
  std::uniform_real_distribution<double> m(1.0, 2.0);
  const double ws[] = {1.0, 0.75, 0x1p-20, 3 * 0x1p-5, -0x1.ffp0, 1536.0};
  for (const Build& b : kBuilds) {
    for (int i = 0; i < 600; ++i) {
      const double w = ws[i % 6], mant = m(rng);
      const double t = (i % 3 ? 1 : -1) * std::ldexp(mant, ex(rng));
      if (!std::isfinite(w * t)) continue;
      const long double x = static_cast<long double>(w) * t;  // exact
      CAPTURE(b.name, w, t);
      double s, c;
      b.sincos(b.angle(w, 0.0, t), s, c);
      CHECK(std::fabs(s - sinl(x)) <= tol_phase_sincos(0) + 2 * kEpsLd);
      CHECK(std::fabs(c - cosl(x)) <= tol_phase_sincos(0) + 2 * kEpsLd);
      const long double rl = b.angle_ld(w, t);
      CHECK(std::fabs(sinl(rl) - sinl(x)) <= 8 * kEpsLd);
      CHECK(std::fabs(cosl(rl) - cosl(x)) <= 8 * kEpsLd);
    }
  }
}
#endif
