/* TEST ONLY (packaging/test_windows.sh), never shipped: Wine 8 has no icuuc.dll, which
   Qt6Core imports (Windows 10 1703 and later ship it) for its legacy text codecs. This
   stand-in has the converter functions Qt6Core imports and knows no converter: ucnv_open
   fails with U_UNSUPPORTED_ERROR, so Qt uses its own UTF-8/UTF-16/Latin-1 codecs (all
   the app uses) and reports other encodings as unavailable. */
#include <stddef.h>
#include <stdint.h>

typedef int UErrorCode;
#define U_UNSUPPORTED_ERROR 16

void *ucnv_open(const char *name, UErrorCode *status) {
  (void)name;
  if (status && *status <= 0) *status = U_UNSUPPORTED_ERROR;
  return NULL;
}
void ucnv_close(void *converter) { (void)converter; }
void ucnv_reset(void *converter) { (void)converter; }
int32_t ucnv_countAvailable(void) { return 0; }
const char *ucnv_getAvailableName(int32_t n) { (void)n; return NULL; }
const char *ucnv_getStandardName(const char *name, const char *standard, UErrorCode *status) {
  (void)name; (void)standard; (void)status;
  return NULL;
}
const char *ucnv_getName(const void *converter, UErrorCode *status) {
  (void)converter;
  if (status && *status <= 0) *status = U_UNSUPPORTED_ERROR;
  return NULL;
}
int8_t ucnv_getMaxCharSize(const void *converter) { (void)converter; return 4; }
/* Never reached without a converter; present because Qt6Core imports them. */
static void unsupported(void) {}
void UCNV_FROM_U_CALLBACK_SUBSTITUTE(void) { unsupported(); }
void UCNV_TO_U_CALLBACK_SUBSTITUTE(void) { unsupported(); }
void ucnv_getToUCallBack(void) { unsupported(); }
void ucnv_getFromUCallBack(void) { unsupported(); }
void ucnv_setToUCallBack(void) { unsupported(); }
void ucnv_setFromUCallBack(void) { unsupported(); }
void ucnv_cbToUWriteUChars(void) { unsupported(); }
void ucnv_cbFromUWriteUChars(void) { unsupported(); }
void ucnv_toUnicode(void) { unsupported(); }
void ucnv_fromUnicode(void) { unsupported(); }
int32_t ucnv_toUCountPending(void) { return 0; }
int32_t ucnv_fromUCountPending(void) { return 0; }
