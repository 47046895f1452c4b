/* Minimal reproduction (C runtime level): one thread blocks in _read(0) on a stdin pipe;
   the main thread then calls a C-runtime function that locks descriptor 0. The CRT holds
   descriptor 0's lock for the whole of the read, so the call waits until input comes. */
#include <fcntl.h>
#include <io.h>
#include <stdio.h>
#include <windows.h>
static DWORD WINAPI reader(void *unused) {
  char buffer[16];
  (void)unused;
  int got = _read(0, buffer, sizeof buffer);
  printf("reader: _read returned %d\n", got);
  fflush(stdout);
  return 0;
}
int main(void) {
  CreateThread(NULL, 0, reader, NULL, 0, NULL);
  Sleep(1000);
  DWORD start = GetTickCount();
  printf("main: _isatty(0) = %d after %lu ms\n", _isatty(0), GetTickCount() - start);
  fflush(stdout);
  start = GetTickCount();
  long long where = _lseeki64(0, 0, SEEK_CUR);
  printf("main: _lseeki64(0) = %lld after %lu ms\n", where, GetTickCount() - start);
  fflush(stdout);
  start = GetTickCount();
  int mode = _setmode(0, _O_BINARY);
  printf("main: _setmode(0) = %d after %lu ms\n", mode, GetTickCount() - start);
  fflush(stdout);
  return 0;
}
