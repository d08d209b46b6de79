// The SASS loop report of `moejit inspect --emit loops` (moejit/sass_report.hpp), on text shaped like
// cuobjdump's and nvdisasm's output: no toolkit disassembler is needed to test it.
#include "catch_compat.hpp"

#include "moejit/sass_report.hpp"

using namespace moejit;

namespace {

// Two kernels as cuobjdump prints them: the first has a two-level loop nest (an inner loop closed by a
// predicated branch, an outer one closed by a divergent-aware conditional branch), a forward branch
// and encoding comments; the second has one loop with a spill.
const char* kCuobjdump = R"sass(
	code for sm_90a
		Function : kernel_a
	.headerflags	@"EF_CUDA_TEXMODE_UNIFIED EF_CUDA_64BIT_ADDRESS EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   LDC R1, c[0x0][0x28] ;                                  /* 0x00000a00ff017b82 */
                                                                                           /* 0x000fe20000000800 */
        /*0010*/               @P0 BRA 0x60 ;                                              /* 0x0000000000100947 */
                                                                                           /* 0x000fea0003800000 */
        /*0020*/                   LDG.E.NA.128.CONSTANT R24, desc[UR8][R54.64] ;          /* 0x0000000836187981 */
        /*0030*/                   LOP3.LUT R32, R24, 0x81c081c0, RZ, 0xc0, !PT ;          /* 0x81c081c018207812 */
        /*0040*/                   HMMA.16816.F32.BF16 R28, R32, R4, RZ ;                  /* 0x000000042020723c */
        /*0050*/              @!P1 BRA 0x20 ;                                              /* 0xfffffffc00d48947 */
        /*0060*/                   STS [R2], R28 ;                                         /* 0x0000001c02007388 */
        /*0070*/              @!P0 BRA P3, 0x20 ;                                          /* 0xfffffffc00d48947 */
        /*0080*/                   EXIT ;                                                  /* 0x000000000000794d */
        /*0090*/                   BRA 0x90;                                               /* 0xfffffffc00fc7947 */
        /*00a0*/                   WARPSYNC.ALL ;                                          /* 0x0000000000007948 */
        /*00b0*/                   BRA 0x60 ;                                              /* 0xfffffffc00fc7947 */
		Function : kernel_b
        /*0000*/                   S2R R0, SR_TID.X ;                                      /* 0x0000000000007919 */
        /*0010*/                   LDL R5, [R1+0x4] ;                                      /* 0x0000040001057983 */
        /*0020*/                   CCTL.E.PF2 [R54+0x800] ;                                /* 0x0000080036007b8f */
        /*0030*/                   BRA.DIV UR4, 0x10 ;                                     /* 0x0000004604dc7947 */
        /*0040*/                   EXIT ;                                                  /* 0x000000000000794d */
)sass";

}  // namespace

TEST_CASE("the SASS loop report finds each loop, its size, opcodes, spills and load order", "[sass]") {
  const auto loops = sass_loops(kCuobjdump);
  REQUIRE(loops.size() == 3);
  // kernel_a's outer loop 0x20..0x70 holds the inner loop 0x20..0x50; its padding branch (0x90) and the
  // cold path's return over the EXIT (0xb0 -> 0x60) are no loops.
  CHECK(loops[0].function == "kernel_a");
  CHECK(loops[0].begin == 0x20);
  CHECK(loops[0].end == 0x70);
  CHECK(loops[0].instructions == 6);
  CHECK(loops[0].depth == 0);
  CHECK(loops[0].order == "LDG@1 HMMA@3 STS@5");
  CHECK(loops[1].begin == 0x20);
  CHECK(loops[1].end == 0x50);
  CHECK(loops[1].instructions == 4);
  CHECK(loops[1].depth == 1);
  CHECK(loops[1].opcodes.at("LOP3") == 1);
  CHECK(loops[1].opcodes.at("BRA") == 1);
  CHECK(loops[1].spills == 0);
  CHECK(loops[1].order == "LDG@1 HMMA@3");
  // kernel_b's divergence branch closes a loop over a local load.
  CHECK(loops[2].function == "kernel_b");
  CHECK(loops[2].begin == 0x10);
  CHECK(loops[2].end == 0x30);
  CHECK(loops[2].instructions == 3);
  CHECK(loops[2].spills == 1);
  CHECK(loops[2].order == "LDL@1 CCTL@2");

  const std::string report = sass_loop_report(kCuobjdump);
  CHECK(report.find("kernel_a\nloop 0x0020-0x0070: 6 instructions\n") != std::string::npos);
  CHECK(report.find("  loop 0x0020-0x0050: 4 instructions\n") != std::string::npos);
  CHECK(report.find("kernel_b\nloop 0x0010-0x0030: 3 instructions, 1 spill loads/stores\n") != std::string::npos);
  CHECK(report.find("order: LDG@1 HMMA@3 STS@5") != std::string::npos);
}

TEST_CASE("the SASS loop report reads nvdisasm's format and text without loops", "[sass]") {
  // nvdisasm --print-code: no encoding comments, no "code for" banner.
  const char* nvdisasm = R"(
	.text.kernel_c:
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/                   IADD3 R2, R2, 0x1, RZ ;
        /*0020*/                   ISETP.GE.AND P0, PT, R2, 0x10, PT ;
        /*0030*/              @!P0 BRA `(.L_x_1) ;
        /*0040*/              @!P0 BRA 0x10 ;
        /*0050*/                   EXIT ;
)";
  const auto loops = sass_loops(nvdisasm);
  REQUIRE(loops.size() == 1);  // a branch to a label is not followed
  CHECK(loops[0].function.empty());
  CHECK(loops[0].instructions == 4);
  CHECK(loops[0].order.empty());
  CHECK(sass_loop_report("ptxas info: nothing to see\n/* 0x000fe20000000800 */\n") == "no loops\n");
  CHECK(sass_loops("").empty());
  // A backward branch to an address that is no instruction of the function (malformed text): no loop.
  CHECK(sass_loops("/*0010*/ NOP ;\n/*0020*/ BRA 0x8 ;\n").empty());
  // Addresses and targets too long for 64 bits are not instructions or branch targets.
  CHECK(sass_loops("/*00000000000000010*/ NOP ;\n/*0020*/ @P0 BRA 0x100000000000000010 ;\n").empty());
}
