# Picture 3: wavelength 2 pi / omega_i of each pair of a Llama-3.1-style head (wavelengths.dat).
load "common.gp"
set output outdir . "/wavelengths.png"
set title "Wavelength of each rotary pair, d = 128, theta = 5e5, trained context 8192 (factor 8)"
set xlabel "pair i"
set ylabel "wavelength 2 pi / omega_i (tokens)"
set logscale y
set xrange [0:63]
set format y "1e%L"
set key top left font ",9"
set arrow from graph 0, first 8192 to graph 1, first 8192 nohead lw 2 dt 2 lc rgb "red"
set label "trained context 8192" at graph 0.62, first 8192*1.6 tc rgb "red"
plot dat("wavelengths.dat") u 1:2 w lp pt 7 ps 0.4 lw 2 t "default", \
     "" u 1:3 w l lw 2 t "linear", \
     "" u 1:4 w l lw 2 t "dynamic NTK at 16384", \
     "" u 1:5 w l lw 2 t "YaRN (original 8192)", \
     "" u 1:6 w l lw 2 dt 2 t "Llama 3 (low 1, high 4)", \
     "" u 1:7 w l lw 2 dt 4 t "LongRoPE (illustrative long_factor)"
