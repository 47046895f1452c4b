/* mmforge.exe / mmforge-gui.exe: run the bundled Python on mmforge.app.

   Built with mingw-w64 by packaging/build_windows.sh, twice:
   - mmforge.exe (console subsystem): python\python.exe -m mmforge.app ARGS...
   - mmforge-gui.exe (windows subsystem, -DGUI): python\pythonw.exe -m mmforge.app gui ARGS...
   The command line after the launcher's own name is passed on unchanged; the exit code
   comes back. The console launcher ignores Ctrl+C: the Python process shares the console,
   gets it and decides (a conversion stops at its next check). */
#define WIN32_LEAN_AND_MEAN
#include <windows.h>
#include <wchar.h>

#ifdef GUI
#define INTERPRETER L"pythonw.exe"
#define PREFIX L" -m mmforge.app gui"
#else
#define INTERPRETER L"python.exe"
#define PREFIX L" -m mmforge.app"
#endif

static const wchar_t *after_program_name(const wchar_t *line) {
  /* The first argument as CommandLineToArgvW parses it: quoted, or up to white space. */
  if (*line == L'"') {
    line++;
    while (*line && *line != L'"') line++;
    if (*line) line++;
  } else {
    while (*line && *line != L' ' && *line != L'\t') line++;
  }
  while (*line == L' ' || *line == L'\t') line++;
  return line;
}

static int fail(const wchar_t *what) {
  wchar_t text[1024];
  _snwprintf(text, 1023, L"Multimodal Forge cannot start: %ls (error %lu)", what, GetLastError());
  text[1023] = 0;
#ifdef GUI
  MessageBoxW(NULL, text, L"Multimodal Forge", MB_ICONERROR);
#else
  DWORD written;
  HANDLE err = GetStdHandle(STD_ERROR_HANDLE);
  WriteConsoleW(err, text, (DWORD)wcslen(text), &written, NULL);
  WriteConsoleW(err, L"\r\n", 2, &written, NULL);
#endif
  return 1;
}

int wmain(void) {
  static wchar_t folder[32768], python[32768];
  DWORD n = GetModuleFileNameW(NULL, folder, 32768);
  if (n == 0 || n >= 32768) return fail(L"no module file name");
  wchar_t *slash = wcsrchr(folder, L'\\');
  if (!slash) return fail(L"odd module file name");
  *slash = 0;
  _snwprintf(python, 32767, L"%ls\\python\\" INTERPRETER, folder);
  python[32767] = 0;
  const wchar_t *rest = after_program_name(GetCommandLineW());
  size_t size = wcslen(python) + wcslen(PREFIX) + wcslen(rest) + 8;
  wchar_t *command = HeapAlloc(GetProcessHeap(), 0, size * sizeof(wchar_t));
  if (!command) return fail(L"out of memory");
  _snwprintf(command, size, L"\"%ls\"" PREFIX L"%ls%ls", python, *rest ? L" " : L"", rest);
  command[size - 1] = 0;
#ifndef GUI
  SetConsoleCtrlHandler(NULL, TRUE);
#endif
  STARTUPINFOW si;
  PROCESS_INFORMATION pi;
  ZeroMemory(&si, sizeof si);
  si.cb = sizeof si;
  if (!CreateProcessW(python, command, NULL, NULL, TRUE, 0, NULL, NULL, &si, &pi))
    return fail(python);
  CloseHandle(pi.hThread);
  WaitForSingleObject(pi.hProcess, INFINITE);
  DWORD code = 1;
  GetExitCodeProcess(pi.hProcess, &code);
  CloseHandle(pi.hProcess);
  return (int)code;
}

#ifdef GUI
int WINAPI wWinMain(HINSTANCE instance, HINSTANCE previous, PWSTR line, int show) {
  (void)instance; (void)previous; (void)line; (void)show;
  return wmain();
}
#endif
