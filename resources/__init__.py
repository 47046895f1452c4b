"""Files shipped with the app: probe image and audio, fonts, icons."""
