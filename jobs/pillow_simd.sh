# pillow-simd, built from its source release against the vendored libjpeg-turbo: sourced by
# jobs/install.sh (a build for this machine) and jobs/release/build_wheels.sh (the x86-64 wheel). One version
# and one set of features for both, so that a clone and the wheels encode the same JPEG bytes
# (prepare re-encodes odd images and prepare.sample draws its images with PIL).
#
# pillow-simd's SIMD is x86 only, and it is built for AVX2 (every x86 server CPU since 2013-2017).
# Only JPEG and zlib are built in: nothing this project runs reads TIFF, WebP, fonts or colour
# profiles, and each would be one more system library to find at build time and to carry in a wheel.
PILLOW_SIMD_VERSION=12.1.1.post0
PILLOW_SIMD_WITHOUT=(tiff freetype raqm lcms webp jpeg2000 imagequant xcb avif)

# pillow_simd_wheel PYTHON JPEG_PREFIX OUT_DIR [pip options]: a pillow-simd wheel in OUT_DIR, built
# with $CC plus $PILLOW_SIMD_FLAGS (default -mavx2) against JPEG_PREFIX/include and JPEG_PREFIX/lib/libjpeg.a
# (third_party/libjpeg_turbo.py makes that prefix). --no-cache-dir: pip's cache of built wheels is
# keyed by the source release only, and would hand back a wheel built against another libjpeg.
pillow_simd_wheel() {
  local python=$1 jpeg=$2 out=$3
  shift 3
  local settings=() feature
  for feature in "${PILLOW_SIMD_WITHOUT[@]}"; do settings+=(--config-settings "$feature=disable"); done
  JPEG_ROOT=$jpeg CC="${CC:-cc} ${PILLOW_SIMD_FLAGS--mavx2}" "$python" -m pip --disable-pip-version-check -q wheel --no-deps \
    --no-cache-dir --no-binary pillow-simd "${settings[@]}" "$@" -w "$out" "pillow-simd==$PILLOW_SIMD_VERSION"
}
