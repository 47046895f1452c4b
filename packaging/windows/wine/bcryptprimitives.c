/* TEST ONLY (packaging/test_windows.sh), never shipped: Wine 8 has no
   bcryptprimitives.dll. Rust's standard library (1.78 and later: tokenizers,
   onnxruntime-genai, hf_xet) draws its random numbers from ProcessPrng in it; Windows 10
   and later have it. Here it asks bcrypt's system RNG, which Wine has. */
#include <windows.h>
#include <bcrypt.h>

BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T size) {
  while (size > 0) {
    ULONG chunk = size > 0x40000000 ? 0x40000000 : (ULONG)size;
    if (BCryptGenRandom(NULL, data, chunk, BCRYPT_USE_SYSTEM_PREFERRED_RNG) != 0) return FALSE;
    data += chunk;
    size -= chunk;
  }
  return TRUE;
}
