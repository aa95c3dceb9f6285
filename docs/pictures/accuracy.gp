# Picture 4: relative error of an encoded float vector against position (accuracy.dat).
load "common.gp"
set output outdir . "/accuracy.png"
set title "RoPE (d 128, theta 1e4) on a float vector: error against a long double reference"
set xlabel "position t"
set ylabel "relative error |q~ - q~_ref| / |q|"
set logscale xy
set format x "2^%L"
set logscale x 2
set format y "1e%L"
set key top left
plot dat("accuracy.dat") u 1:2 w lp pt 7 ps 0.5 lw 2 t "peal (float storage, angles from double frequency pairs)", \
     "" u 1:3 w lp pt 5 ps 0.5 lw 2 t "float32 angle: inv_freq * t in float, cosf/sinf"
