; Inno Setup script for Multimodal Forge on Windows (x64), over the PyInstaller folder that
; packaging/mmforge.spec builds. Build steps: packaging/windows/README.md.
#define AppVersion GetEnv("MMFORGE_VERSION")
#if AppVersion == ""
  #define AppVersion "0.1.0"
#endif

[Setup]
AppId={{6B2F8F0E-3C1D-4B8E-9C55-6D2C1A7E4F10}
AppName=Multimodal Forge
AppVersion={#AppVersion}
AppPublisher=Multimodal Forge developers
DefaultDirName={autopf}\Multimodal Forge
DefaultGroupName=Multimodal Forge
OutputDir=..\..\dist
OutputBaseFilename=mmforge-{#AppVersion}-windows-x64-setup
ArchitecturesAllowed=x64compatible
ArchitecturesInstallIn64BitMode=x64compatible
Compression=lzma2/max
SolidCompression=yes
SetupIconFile=..\..\build\packaging-windows\mmforge.ico
UninstallDisplayIcon={app}\mmforge.exe
; Per-user data (conversations, packages, logs) lives in %LOCALAPPDATA%\mmforge and is
; never written under Program Files.
PrivilegesRequiredOverridesAllowed=dialog

[Files]
Source: "..\..\build\packaging-windows\dist\mmforge\*"; DestDir: "{app}"; Flags: recursesubdirs ignoreversion

[Icons]
Name: "{group}\Multimodal Forge"; Filename: "{app}\mmforge.exe"; Parameters: "gui"
Name: "{autodesktop}\Multimodal Forge"; Filename: "{app}\mmforge.exe"; Parameters: "gui"; Tasks: desktopicon

[Tasks]
Name: "desktopicon"; Description: "Create a desktop shortcut"; Flags: unchecked

[Run]
Filename: "{app}\mmforge.exe"; Parameters: "gui"; Description: "Start Multimodal Forge"; Flags: nowait postinstall skipifsilent
