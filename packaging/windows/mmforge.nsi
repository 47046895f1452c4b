; NSIS script for the Multimodal Forge Windows (x64) installer. packaging/build_windows.sh
; stages the files and runs: makensis -DVERSION=... -DSTAGE=... -DOUTFILE=... mmforge.nsi
;
; - All users (Program Files, asks for admin) or just this user without admin
;   (%LOCALAPPDATA%\Programs): the page asks; on the command line /AllUsers or
;   /CurrentUser, /S for silent, /D=folder for the folder.
; - A Start-menu entry (mmforge-gui.exe: no console window) and an Add/Remove Programs
;   entry for the install's scope.
; - The app keeps its data in %LOCALAPPDATA%\mmforge (packages, conversations, cache,
;   logs: platformdirs). The uninstaller removes the program, the cache and the logs, and
;   asks whether to remove the packages and conversations too (a silent uninstall keeps
;   them).
Unicode true
Target amd64-unicode
; zlib, solid: measured 247 MiB, built in 6 min on this 2-core machine; -DCOMPRESSOR=lzma is
; smaller but took over 30 min (and was not finished) here.
!ifndef COMPRESSOR
  !define COMPRESSOR zlib
!endif
SetCompressor /SOLID ${COMPRESSOR}
!if ${COMPRESSOR} == lzma
  SetCompressorDictSize 64
!endif

!ifndef VERSION
  !error "-DVERSION=x.y.z"
!endif
!ifndef STAGE
  !error "-DSTAGE=folder with the staged program files"
!endif
!ifndef OUTFILE
  !define OUTFILE "mmforge-${VERSION}-windows-x64-setup.exe"
!endif

!define APPNAME "Multimodal Forge"
!define UNINSTKEY "Software\Microsoft\Windows\CurrentVersion\Uninstall\mmforge"
!define DATADIR "$LOCALAPPDATA\mmforge"

!define MULTIUSER_EXECUTIONLEVEL Highest
!define MULTIUSER_MUI
!define MULTIUSER_INSTALLMODE_COMMANDLINE
!define MULTIUSER_USE_PROGRAMFILES64
!define MULTIUSER_INSTALLMODE_INSTDIR "${APPNAME}"
!define MULTIUSER_INSTALLMODE_INSTDIR_REGISTRY_KEY "${UNINSTKEY}"
!define MULTIUSER_INSTALLMODE_INSTDIR_REGISTRY_VALUENAME "InstallLocation"
; The uninstaller finds the scope it was installed for from the key it wrote.
!define MULTIUSER_INSTALLMODE_DEFAULT_REGISTRY_KEY "${UNINSTKEY}"
!define MULTIUSER_INSTALLMODE_DEFAULT_REGISTRY_VALUENAME "InstallLocation"
!include MultiUser.nsh
!include MUI2.nsh
!include LogicLib.nsh
!include x64.nsh

Name "${APPNAME}"
OutFile "${OUTFILE}"
BrandingText "${APPNAME} ${VERSION}"
!define MUI_ICON "${STAGE}\mmforge.ico"
!define MUI_UNICON "${STAGE}\mmforge.ico"
!define MUI_ABORTWARNING
!define MUI_FINISHPAGE_RUN "$INSTDIR\mmforge-gui.exe"
!define MUI_FINISHPAGE_RUN_TEXT "Start ${APPNAME}"

!insertmacro MULTIUSER_PAGE_INSTALLMODE
!insertmacro MUI_PAGE_DIRECTORY
!insertmacro MUI_PAGE_INSTFILES
!insertmacro MUI_PAGE_FINISH
!insertmacro MUI_UNPAGE_CONFIRM
!insertmacro MUI_UNPAGE_INSTFILES
!insertmacro MUI_LANGUAGE "English"

VIProductVersion "${VERSION}.0"
VIAddVersionKey "ProductName" "${APPNAME}"
VIAddVersionKey "FileVersion" "${VERSION}"
VIAddVersionKey "ProductVersion" "${VERSION}"
VIAddVersionKey "FileDescription" "${APPNAME} installer"
VIAddVersionKey "LegalCopyright" "Multimodal Forge developers (MIT); bundled software: licenses\"

Function .onInit
  ${IfNot} ${RunningX64}
    MessageBox MB_ICONSTOP "${APPNAME} needs 64-bit Windows." /SD IDOK
    Abort
  ${EndIf}
  SetRegView 64
  !insertmacro MULTIUSER_INIT
FunctionEnd

Function un.onInit
  SetRegView 64
  !insertmacro MULTIUSER_UNINIT
FunctionEnd

Section "Program" SecProgram
  SectionIn RO
  ; An older version's Python files must not stay beside the new ones.
  RMDir /r "$INSTDIR\python"
  SetOutPath "$INSTDIR"
  File /r "${STAGE}\*"
  WriteUninstaller "$INSTDIR\uninstall.exe"
  CreateShortCut "$SMPROGRAMS\${APPNAME}.lnk" "$INSTDIR\mmforge-gui.exe" "" "$INSTDIR\mmforge.ico"
  ; SHCTX: HKLM for all users, HKCU for this user (MultiUser set the context).
  WriteRegStr SHCTX "${UNINSTKEY}" "DisplayName" "${APPNAME}"
  WriteRegStr SHCTX "${UNINSTKEY}" "DisplayVersion" "${VERSION}"
  WriteRegStr SHCTX "${UNINSTKEY}" "Publisher" "Multimodal Forge developers"
  WriteRegStr SHCTX "${UNINSTKEY}" "DisplayIcon" "$INSTDIR\mmforge.ico"
  WriteRegStr SHCTX "${UNINSTKEY}" "InstallLocation" "$INSTDIR"
  WriteRegStr SHCTX "${UNINSTKEY}" "UninstallString" '"$INSTDIR\uninstall.exe" /$MultiUser.InstallMode'
  WriteRegStr SHCTX "${UNINSTKEY}" "QuietUninstallString" '"$INSTDIR\uninstall.exe" /$MultiUser.InstallMode /S'
  WriteRegDWORD SHCTX "${UNINSTKEY}" "NoModify" 1
  WriteRegDWORD SHCTX "${UNINSTKEY}" "NoRepair" 1
  ${GetSize} "$INSTDIR" "/S=0K" $0 $1 $2
  WriteRegDWORD SHCTX "${UNINSTKEY}" "EstimatedSize" $0
SectionEnd

Section "Uninstall"
  Delete "$SMPROGRAMS\${APPNAME}.lnk"
  DeleteRegKey SHCTX "${UNINSTKEY}"
  ; Only what the installer put there: a folder the user chose may hold other files.
  RMDir /r "$INSTDIR\python"
  RMDir /r "$INSTDIR\licenses"
  Delete "$INSTDIR\mmforge.exe"
  Delete "$INSTDIR\mmforge-gui.exe"
  Delete "$INSTDIR\mmforge.ico"
  Delete "$INSTDIR\uninstall.exe"
  RMDir "$INSTDIR"
  ; The app's data is this user's, whatever the install's scope.
  SetShellVarContext current
  ; Its settings (window size, recent models: Qt's QSettings, organisation "mmforge").
  DeleteRegKey HKCU "Software\mmforge"
  IfFileExists "${DATADIR}\*.*" 0 done
  MessageBox MB_YESNO|MB_ICONQUESTION \
    "Remove your converted packages and conversations too?$\n$\n(${DATADIR}\packages and ${DATADIR}\conversations; No keeps them.)" \
    /SD IDNO IDYES everything
  ; Keep packages and conversations; remove the rest (cache, logs, settings).
  FindFirst $0 $1 "${DATADIR}\*"
  loop:
    StrCmp $1 "" found_all
    StrCmp $1 "." next
    StrCmp $1 ".." next
    StrCmp $1 "packages" next
    StrCmp $1 "conversations" next
    RMDir /r "${DATADIR}\$1"
    Delete "${DATADIR}\$1"
  next:
    FindNext $0 $1
    Goto loop
  found_all:
  FindClose $0
  RMDir "${DATADIR}"
  Goto done
  everything:
  RMDir /r "${DATADIR}"
  done:
SectionEnd
